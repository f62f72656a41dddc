"""TFRecord shards in the layout of tf_cnn_benchmarks' ImageNet input (build_imagenet_data.py).

Files `<dir>/train-00000-of-0000N` (and `validation-…` for the val split), each a sequence of
serialized `tf.train.Example`s with the features of build_imagenet_data.py:

    image/encoded         the source file's bytes, unchanged (a PNG is re-encoded as JPEG,
                          as build_imagenet_data.py does; the manifest lists such files)
    image/format          b"JPEG"            image/filename      b"n01440764_10026.JPEG"
    image/height, /width  int64 (decoded)    image/colorspace    b"RGB"   image/channels  3
    image/class/label     int64, the 0-based class index + LABEL_OFFSET (1): tf_cnn_benchmarks
                          keeps 0 for "background" and builds 1001-way models
    image/class/synset    b"n01440764"       image/class/text    the wnid (no WordNet names here)
    image/object/bbox/xmin|ymin|xmax|ymax (float) and /label (int64): empty lists

`decode` returns the 0-based label, the same number ImageFolder and RecordIO give.

TensorFlow is imported inside the functions: the module imports in any environment.
"""

from __future__ import annotations

import os

from dlbench.data import DataError, file_entry, imagenet, read_manifest, require_file, write_manifest


def tfrecord_shards(split: str, shards: int) -> list[str]:
    prefix = {"train": "train", "val": "validation"}[split]
    return [f"{prefix}-{i:05d}-of-{shards:05d}" for i in range(shards)]


LABEL_OFFSET = 1
BBOX_KEYS = ("xmin", "ymin", "xmax", "ymax")


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def _example(tf, data: bytes, entry: imagenet.Entry, height: int, width: int):
    def ints(*values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def floats():
        return tf.train.Feature(float_list=tf.train.FloatList(value=[]))

    def raw(value: bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    feature = {
        "image/height": ints(height),
        "image/width": ints(width),
        "image/colorspace": raw(b"RGB"),
        "image/channels": ints(3),
        "image/class/label": ints(entry.label + LABEL_OFFSET),
        "image/class/synset": raw(entry.wnid.encode()),
        "image/class/text": raw(entry.wnid.encode()),
        "image/format": raw(b"JPEG"),
        "image/filename": raw(entry.filename.encode()),
        "image/encoded": raw(data),
        "image/object/bbox/label": ints(),
        **{f"image/object/bbox/{key}": floats() for key in BBOX_KEYS},
    }
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _decoded(tf, root, entry: imagenet.Entry) -> tuple[bytes, int, int, bool]:
    """(JPEG bytes, height, width, re-encoded?) after decoding with tf.io.decode_jpeg."""
    path, data, kind = imagenet.read_image(root, entry)
    try:
        if kind == "png":
            pixels = tf.io.decode_png(data, channels=3)
            data = tf.io.encode_jpeg(pixels, format="rgb", quality=100).numpy()
        image = tf.io.decode_jpeg(data, channels=3)
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as error:
        reason = (error.message or type(error).__name__).strip().splitlines()[0]
        raise DataError(f"{path}: corrupt image (tf.io.decode_jpeg: {reason})") from None
    height, width, _ = image.shape
    return data, int(height), int(width), kind == "png"


def convert(source: str | os.PathLike, out_dir: str | os.PathLike, *, splits, shards: dict, seed: int) -> dict:
    """Write the shards of each split and the manifest; `shards` maps split → shard count."""
    tf = _tf()
    source, out_dir = os.path.abspath(source), os.fspath(out_dir)
    wnids, plan = imagenet.plan(source, splits, seed)
    os.makedirs(out_dir, exist_ok=True)
    manifest_splits, reencoded = {}, []
    for split, entries in plan.items():
        names = tfrecord_shards(split, shards[split])
        files = []
        for name, (start, end) in zip(names, imagenet.shard_ranges(len(entries), len(names)), strict=True):
            path = os.path.join(out_dir, name)
            with tf.io.TFRecordWriter(path) as writer:
                for entry in entries[start:end]:
                    data, height, width, was_png = _decoded(tf, source, entry)
                    if was_png:
                        reencoded.append(entry.path)
                    writer.write(_example(tf, data, entry, height, width).SerializeToString(deterministic=True))
            files.append({**file_entry(path, out_dir), "count": end - start})
        manifest_splits[split] = {"count": len(entries), "shards": files}
    return write_manifest(
        out_dir,
        {
            "format": "tfrecord",
            "layout": "tf_cnn_benchmarks (build_imagenet_data.py)",
            "source": source,
            "classes": wnids,
            "label": "image/class/label = 0-based index of the sorted wnid + 1 (0: background)",
            "label_offset": LABEL_OFFSET,
            "order_seed": seed,
            "splits": manifest_splits,
            "reencoded": reencoded,
        },
    )


# ---- readers ----


def shard_paths(directory: str | os.PathLike, split: str = "train") -> list[str]:
    """The split's shards, in order, from the manifest; a missing or empty shard is an error."""
    manifest = read_manifest(directory)
    if split not in manifest["splits"]:
        raise DataError(f"{directory}: no '{split}' split in the TFRecord manifest")
    return [
        require_file(os.path.join(directory, s["path"]), "TFRecord shard") for s in manifest["splits"][split]["shards"]
    ]


def feature_spec() -> dict:
    """What tf.io.parse_single_example / parse_example needs (tf_cnn_benchmarks' keys)."""
    tf = _tf()
    return {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        **{f"image/object/bbox/{key}": tf.io.VarLenFeature(tf.float32) for key in BBOX_KEYS},
    }


def decode(serialized, dct_method: str = "INTEGER_ACCURATE"):
    """(uint8 HxWx3 image, 0-based int64 label) of one serialized Example (graph-safe).

    INTEGER_ACCURATE is libjpeg's default IDCT, the one PIL and OpenCV use (pixels agree
    with theirs); tf_cnn_benchmarks decodes with INTEGER_FAST, faster and off by about
    one grey level on average.
    """
    tf = _tf()
    features = tf.io.parse_single_example(serialized, feature_spec())
    image = tf.io.decode_jpeg(features["image/encoded"], channels=3, dct_method=dct_method)
    return image, features["image/class/label"] - LABEL_OFFSET


def read_examples(directory: str | os.PathLike, split: str = "train", limit: int | None = None) -> list[dict]:
    """The first `limit` examples in record order, decoded eagerly (tests, checks)."""
    tf = _tf()
    dataset = tf.data.TFRecordDataset(shard_paths(directory, split))
    if limit is not None:
        dataset = dataset.take(limit)
    examples = []
    for serialized in dataset:
        features = tf.io.parse_single_example(serialized, feature_spec())
        image, label = decode(serialized)
        examples.append(
            {
                "image": image.numpy(),
                "label": int(label),
                "stored_label": int(features["image/class/label"]),
                "synset": features["image/class/synset"].numpy().decode(),
                "filename": features["image/filename"].numpy().decode(),
                "height": int(features["image/height"]),
                "width": int(features["image/width"]),
                "encoded": features["image/encoded"].numpy(),
            }
        )
    return examples
