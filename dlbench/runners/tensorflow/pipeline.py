"""The TensorFlow runner's real-data input pipelines (tf.data) and what a strategy feeds its step.

ImageNet TFRecords as TensorFlow's official ResNet model and tf_cnn_benchmarks read them,
BERT pre-training examples from memory, and the search for the record behind a decode error
(docs/frameworks/tensorflow.md). TensorFlow is passed in (`tf`): importing this module does
not import it.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

SHUFFLE_BUFFER = 10_000  # records (official ResNet and tf_cnn_benchmarks: 10,000)
INTERLEAVE_CYCLE = 10  # shards read at once (official ResNet: cycle_length 10)
TFRECORD_BUFFER = 8 << 20  # TFRecordDataset read buffer (official ResNet: 8 MB)
CORRUPT_SCAN_S = 60  # after a decode error: how long to look for the record that caused it

# Examples (dlbench.data.bert, create_pretraining_data.py's fields) → the model's inputs.
BERT_FIELDS = {
    "input_ids": "input_ids",
    "token_type_ids": "segment_ids",
    "input_mask": "input_mask",
    "masked_positions": "masked_lm_positions",
    "masked_ids": "masked_lm_ids",
    "masked_weights": "masked_lm_weights",
    "nsp_labels": "next_sentence_labels",
}


@dataclass
class Feed:
    """What the train step reads. `inputs`: captured by the step (the synthetic batch, or a
    parameter-server per-worker iterator); `batches`: the iterator next_batch() reads, whose
    batches the step takes as its argument (`element_spec`: its fixed signature)."""

    inputs: Any = None
    batches: Any = None
    element_spec: Any = None
    # Real data: the pipeline's thread count, how the data is split, how many pipelines.
    threads: int = 1
    sharding: str = ""
    pipelines: int = 1


def _data_options(tf, threads: int):
    # A private pool of `threads` (TF's shared pool would use every core of the machine),
    # each op inside tf.data single-threaded, as the official ResNet and tf_cnn_benchmarks.
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = 1
    options.deterministic = False
    return options


def _parse_and_augment(tf, serialized, size: int):
    """One training example: parse, random crop while decoding, flip, resize; uint8 out.

    As the official ResNet pipeline: `sample_distorted_bounding_box` over the record's
    boxes (the whole image when it has none: min_object_covered 0.1, aspect ratio
    [3/4, 4/3], area [5 %, 100 %], 100 attempts), `decode_and_crop_jpeg` decodes only
    the crop window, random left-right flip, bilinear resize to `size`. The pixels stay
    uint8 (rounded) for the trip to the device; the step converts and normalises.
    """
    from dlbench.data.tfrecord import BBOX_KEYS, LABEL_OFFSET

    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        **{f"image/object/bbox/{key}": tf.io.VarLenFeature(tf.float32) for key in BBOX_KEYS},
    }
    features = tf.io.parse_single_example(serialized, spec)
    box = [features[f"image/object/bbox/{key}"].values for key in ("ymin", "xmin", "ymax", "xmax")]
    boxes = tf.stack(box, axis=1)[tf.newaxis]  # [1, boxes, 4]
    encoded = features["image/encoded"]
    begin, crop, _ = tf.image.sample_distorted_bounding_box(
        tf.image.extract_jpeg_shape(encoded),
        bounding_boxes=boxes,
        min_object_covered=0.1,
        aspect_ratio_range=[0.75, 1.33],
        area_range=[0.05, 1.0],
        max_attempts=100,
        use_image_if_no_bounding_boxes=True,
    )
    window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
    image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
    image = tf.image.random_flip_left_right(image)
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
    label = tf.cast(features["image/class/label"], tf.int32) - LABEL_OFFSET
    return {"images": image, "labels": label}


def image_dataset(tf, shards, *, batch: int, size: int, threads: int, seed, pipelines: int = 1, index: int = 0):
    """The training images of one input pipeline: batches of {"images": uint8 NHWC, "labels"}.

    list shards (shuffled) → this pipeline's shards (whole files when there are at least as
    many as pipelines, else every pipelines-th record) → parallel interleave of the
    TFRecord readers → shuffle buffer → repeat → parallel parse/decode/augment → batch
    (drop remainder) → prefetch (autotuned). `seed` None: a fresh order per pipeline.
    """
    shards = list(shards)
    files = tf.data.Dataset.from_tensor_slices(shards).shuffle(len(shards), seed=seed)
    by_file = pipelines > 1 and len(shards) >= pipelines
    if by_file:
        files = files.shard(pipelines, index)
    cycle = max(1, min(INTERLEAVE_CYCLE, -(-len(shards) // pipelines) if by_file else len(shards)))
    records = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, buffer_size=TFRECORD_BUFFER),
        cycle_length=cycle,
        num_parallel_calls=min(threads, cycle),  # tf.data: at most cycle_length
        deterministic=False,
    )
    if pipelines > 1 and not by_file:
        records = records.shard(pipelines, index)
    dataset = (
        records.shuffle(SHUFFLE_BUFFER, seed=seed)
        .repeat()
        .map(lambda s: _parse_and_augment(tf, s, size), num_parallel_calls=threads, deterministic=False)
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    return dataset.with_options(_data_options(tf, threads))


def image_pipeline_text(shards: int, threads: int, batch: int, size: int, sharding: str, pipelines: int = 1) -> str:
    cycle = max(1, min(INTERLEAVE_CYCLE, -(-shards // pipelines) if shards >= pipelines else shards))
    return (
        f"tf.data TFRecord ({shards} shards, {sharding}): interleave cycle {cycle} x {min(threads, cycle)} threads, "
        f"shuffle {SHUFFLE_BUFFER}, repeat, map {threads} threads (sample_distorted_bounding_box + "
        f"decode_and_crop_jpeg + flip + resize {size}, uint8), batch {batch}, prefetch AUTOTUNE; "
        f"private threadpool {threads}; float + normalise in the step"
    )


def bert_dataset(tf, arrays: dict, *, batch: int, threads: int, seed, pipelines: int = 1, index: int = 0):
    """Pre-training batches from the examples in memory: (shard) → shuffle → repeat → batch → prefetch."""
    dataset = tf.data.Dataset.from_tensor_slices({key: arrays[field] for key, field in BERT_FIELDS.items()})
    if pipelines > 1:
        dataset = dataset.shard(pipelines, index)
    count = len(arrays["input_ids"]) // pipelines
    dataset = dataset.shuffle(count, seed=seed).repeat().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return dataset.with_options(_data_options(tf, threads))


class ImageRecords:
    """The run's ImageNet TFRecord shards: datasets of them, their description, their errors."""

    def __init__(self, tf, spec, size: int):
        from dlbench.data import tfrecord

        self.tf, self.spec, self.size = tf, spec, size
        self.shards = tfrecord.shard_paths(spec.data_dir, "train")

    def dataset(self, batch: int, threads: int, seed, pipelines: int = 1, index: int = 0):
        return image_dataset(
            self.tf,
            self.shards,
            batch=batch,
            size=self.size,
            threads=threads,
            seed=seed,
            pipelines=pipelines,
            index=index,
        )

    def describe(self, feed: Feed) -> str:
        return image_pipeline_text(
            len(self.shards), feed.threads, self.spec.batch, self.size, feed.sharding, feed.pipelines
        )

    def error(self, error):
        """A decode/read error as one DataError naming the record (or the shards)."""
        from dlbench.data import DataError

        found = find_corrupt_record(self.tf, self.shards)
        if found:
            return DataError(found)
        names = ", ".join(os.path.basename(s) for s in self.shards)
        return DataError(f"{self.spec.data_dir} (shards {names}): a record failed to decode: {error_reason(error)}")


class BertExamples:
    """The run's tokenised BERT pre-training examples, in memory."""

    def __init__(self, tf, spec):
        from dlbench.data import DataError, bert

        self.tf, self.spec = tf, spec
        self.arrays = bert.load_examples(spec.data_dir)
        self.count, seq_len = self.arrays["input_ids"].shape
        if seq_len != spec.seq_len:
            raise DataError(f"{spec.data_dir}: examples have sequence length {seq_len}, the run {spec.seq_len}")

    def dataset(self, batch: int, threads: int, seed, pipelines: int = 1, index: int = 0):
        from dlbench.data import DataError

        if self.count // pipelines < batch:
            raise DataError(f"{self.spec.data_dir}: {self.count} examples cannot fill a batch of {batch} per pipeline")
        return bert_dataset(
            self.tf, self.arrays, batch=batch, threads=threads, seed=seed, pipelines=pipelines, index=index
        )

    def describe(self, feed: Feed) -> str:
        n, spec = self.count, self.spec
        return (
            f"tf.data from the tokenised examples in memory ({n} x {spec.seq_len}): shuffle {n}, repeat, "
            f"batch {spec.batch}, prefetch AUTOTUNE ({feed.sharding})"
        )

    def error(self, error):
        from dlbench.data import DataError

        return DataError(f"{self.spec.data_dir}: {error_reason(error)}")


def error_reason(error) -> str:
    """The first line of a TensorFlow error, without its op/function decorations."""
    text = (getattr(error, "message", None) or str(error) or type(error).__name__).strip().splitlines()[0]
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[\[\{\{node [^}]*\}\}\]\]|\s*\[Op:\w+\]( name: \S*)?", "", text)
    return text.strip() or type(error).__name__


def find_corrupt_record(tf, shards, budget_s: float = CORRUPT_SCAN_S) -> str | None:
    """After a decode error: '<shard>: record <i> (<image/filename>): <reason>' of the first
    record of `shards` whose JPEG does not decode (or that cannot be read), or None when none
    is found within `budget_s` seconds (tf.data's errors name the op, not the record)."""
    deadline = time.monotonic() + budget_s
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
    }

    def decoded(i, serialized):
        image = tf.io.decode_jpeg(tf.io.parse_single_example(serialized, spec)["image/encoded"], channels=3)
        return i, tf.shape(image)

    for shard in shards:
        try:
            total = int(tf.data.TFRecordDataset(shard).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
        except tf.errors.OpError as error:
            return f"{shard}: cannot be read as TFRecords ({error_reason(error)})"
        checked = (
            tf.data.TFRecordDataset(shard)
            .enumerate()
            .map(decoded, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .ignore_errors()
        )
        expected = 0  # records come back in order; a record whose decode failed is missing
        for i, _ in checked.as_numpy_iterator():
            if i != expected:
                break
            expected += 1
            if time.monotonic() > deadline:
                return None
        if expected >= total:
            continue
        return _describe_dropped_record(tf, shard, expected, spec)
    return None


def _describe_dropped_record(tf, shard: str, index: int, spec: dict) -> str:
    """Read record `index` of `shard` alone to name it and say why it does not decode."""
    record = next(iter(tf.data.TFRecordDataset(shard).skip(index).take(1)))
    features = tf.io.parse_single_example(record, spec)
    where = f"{shard}: record {index} ({features['image/filename'].numpy().decode(errors='replace')})"
    try:
        tf.io.decode_jpeg(features["image/encoded"], channels=3)
    except tf.errors.OpError as error:
        return f"{where}: corrupt image (tf.io.decode_jpeg: {error_reason(error)})"
    return f"{where}: corrupt image"
