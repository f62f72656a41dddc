"""Datasets without a framework: generation, layout, labels, checks, paths, BERT examples.

The conversions and the cross-format decode test run in the framework environments:
tests/frameworks/test_data_formats.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from dlbench.data import DataError, bert, imagenet, read_manifest, recordio, tokens
from dlbench.planning import datasets as paths
from dlbench.schemas import load_schema

SMALL = dict(count=20, classes=4, image_size=32, seed=3, quality=90, val_count=6)


def tree_bytes(root):
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return files


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen") / "imagenet"
    imagenet.generate(root, **SMALL)
    return root


# ---- generation ----


def test_generation_is_deterministic_and_seeded(generated, tmp_path):
    imagenet.generate(tmp_path / "again", **SMALL)
    assert tree_bytes(generated) == tree_bytes(tmp_path / "again")
    imagenet.generate(tmp_path / "other", **{**SMALL, "seed": 4})
    assert read_manifest(tmp_path / "other")["images_sha256"] != read_manifest(generated)["images_sha256"]


def test_generation_layout_labels_and_counts(generated):
    wnids = imagenet.synthetic_wnids(4)
    assert wnids == sorted(wnids) and all(len(w) == 9 and w.startswith("n") for w in wnids)
    assert imagenet.class_names(generated) == wnids
    assert imagenet.read_labels(generated / "labels.txt") == {w: i for i, w in enumerate(wnids)}
    for wnid in wnids:
        names = sorted(os.listdir(generated / "train" / wnid))
        assert names == sorted(f"{wnid}_{n}.JPEG" for n in range(5))
    train = imagenet.scan(generated, "train", wnids)
    assert len(train) == 20 and all(e.label == wnids.index(e.wnid) for e in train)
    val = imagenet.scan(generated, "val", wnids)
    assert len(val) == 6 and all(e.filename.startswith("ILSVRC2012_val_") for e in val)
    manifest = read_manifest(generated)
    assert manifest["classes"] == wnids and manifest["splits"] == {"train": {"count": 20}, "val": {"count": 6}}


def test_generated_images_are_jpegs_of_varied_size(generated):
    from PIL import Image

    sizes = set()
    for entry in imagenet.scan(generated, "train", imagenet.class_names(generated)):
        with Image.open(generated / entry.path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            sizes.add(image.size)
            pixels = np.asarray(image, dtype=np.float32)
        assert pixels.std() > 10  # not flat
        assert all(0.8 * 32 - 1 <= edge <= 1.25 * 32 + 1 for edge in image.size)
    assert len(sizes) > 5


def test_generation_needs_an_image_per_class(tmp_path):
    with pytest.raises(DataError, match="cannot fill 4 classes"):
        imagenet.generate(tmp_path / "x", **{**SMALL, "count": 3})


# ---- layout errors name the file or directory ----


def test_missing_source_train_and_split_directories(tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path / 'nowhere'}: image dataset directory not found"):
        imagenet.class_names(tmp_path / "nowhere")
    (tmp_path / "root").mkdir()
    with pytest.raises(DataError, match=f"{tmp_path / 'root' / 'train'}: training image directory not found"):
        imagenet.class_names(tmp_path / "root")
    (tmp_path / "root" / "train").mkdir()
    with pytest.raises(DataError, match="no class directories"):
        imagenet.class_names(tmp_path / "root")


def test_empty_class_unknown_val_class_and_missing_val(generated, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(generated, root)
    wnids = imagenet.class_names(root)
    with pytest.raises(DataError, match="image directory of split 'val' not found"):
        imagenet.scan(generated.parent / "nothing", "val", wnids)
    (root / "val" / "n12345678").mkdir()
    with pytest.raises(DataError, match=f"{root / 'val' / 'n12345678'}: class not in train/"):
        imagenet.scan(root, "val", wnids)
    empty = root / "train" / wnids[1]
    shutil.rmtree(empty)
    empty.mkdir()
    with pytest.raises(DataError, match=f"{empty}: no JPEG images"):
        imagenet.scan(root, "train", wnids)


def test_structural_check_names_corrupt_files(generated, tmp_path):
    entry = imagenet.scan(generated, "train", imagenet.class_names(generated))[0]
    data = (generated / entry.path).read_bytes()
    assert imagenet.check_image_bytes("x", data) == "jpeg"
    assert imagenet.check_image_bytes("x", imagenet.PNG_SIGNATURE + b"rest") == "png"
    cases = {
        "truncated": data[: len(data) // 2],
        "not a JPEG": b"GIF89a" + data,
        "empty": b"",
    }
    for reason, corrupt in cases.items():
        path = tmp_path / f"{reason}.JPEG"
        with pytest.raises(DataError, match=f"^{path}: corrupt image .*{reason}"):
            imagenet.check_image_bytes(path, corrupt)


def test_record_order_and_shards(generated):
    entries = imagenet.scan(generated, "train", imagenet.class_names(generated))
    order = imagenet.record_order(entries, 0)
    assert order == imagenet.record_order(entries, 0) != entries
    assert sorted(order, key=lambda e: e.path) == sorted(entries, key=lambda e: e.path)
    ranges = imagenet.shard_ranges(20, 3)
    assert ranges == [(0, 6), (6, 13), (13, 20)]
    assert imagenet.shard_ranges(2, 4) == [(0, 0), (0, 1), (1, 1), (1, 2)]


# ---- the stdlib RecordIO reader (framing of dmlc recordio, split records) ----


def test_stdlib_recordio_reader(tmp_path):
    import struct

    magic = struct.pack("<I", recordio.MAGIC)
    header = struct.pack(recordio.IR_FORMAT, 0, 3.0, 7, 0)
    payload = header + b"abc" + magic + b"defgh"
    parts = [payload[: len(header) + 3], payload[len(header) + 7 :]]  # the writer splits at the magic word
    with open(tmp_path / "x.rec", "wb") as f:
        for cflag, part in zip((1, 3), parts, strict=True):
            f.write(magic + struct.pack("<I", (cflag << 29) | len(part)) + part + b"\0" * ((4 - len(part) % 4) % 4))
    (tmp_path / "x.idx").write_text("0\t0\n")
    assert recordio.read_index(tmp_path / "x.idx") == {0: 0}
    (flag, label, index, _), data = recordio.read_raw(tmp_path / "x.rec", 0)
    assert (flag, label, index, data) == (0, 3.0, 7, b"abc" + magic + b"defgh")


# ---- paths ----


def schema_defaults():
    schema = load_schema("config")
    sections = schema["properties"]["data"]["properties"]
    return {name: {k: v["default"] for k, v in sections[name]["properties"].items()} for name in sections}


def test_paths_defaults_are_the_schemas():
    # The schema is the one source: settings of an empty config are its defaults, resolved
    # (no val split → no val images; seq_len 0 → BERT's 128).
    defaults = schema_defaults()
    assert paths.image_settings({}) == {**defaults["images"], "val_count": 0}
    assert paths.text_settings({}) == {**defaults["text"], "seq_len": 128}  # BERT's default
    assert defaults["text"]["examples"] == 512 and defaults["images"]["shards"] == 4


def test_dataset_paths_and_train_inputs():
    config = {"data": {"images": {"shards": 2, "splits": ["train", "val"], "val_shards": 1}}}
    image_id = paths.images_id(config)
    assert image_id.startswith("generated-") and image_id != paths.images_id({})
    assert paths.images_source(config) == f"results/data/images/{image_id}"
    assert paths.dataset_path("tensorflow", "image", config) == f"results/data/tfrecord/{image_id}"
    assert paths.dataset_files("tensorflow", "image", config) == [
        f"results/data/tfrecord/{image_id}/{name}"
        for name in ("train-00000-of-00002", "train-00001-of-00002", "validation-00000-of-00001", "manifest.json")
    ]
    assert [os.path.basename(p) for p in paths.dataset_files("mxnet", "image", config)] == [
        "train.rec", "train.idx", "train.lst", "val.rec", "val.idx", "val.lst", "manifest.json",
    ]  # fmt: skip
    assert paths.train_data_inputs("pytorch", "resnet50", config) == [
        f"results/data/imagefolder/{image_id}/manifest.json"
    ]
    text = paths.train_data_inputs("mxnet", "bert_base", config)
    assert [os.path.basename(p) for p in text] == ["examples.npz", "vocab.txt", "corpus.txt", "manifest.json"]
    assert paths.dataset_path("tensorflow", "text", config) == paths.dataset_path("pytorch", "text", config)
    with pytest.raises(ValueError, match="'caffe'"):
        paths.dataset_path("caffe", "image", config)


def test_ids_follow_settings_and_source():
    real = {"data": {"images": {"source": "/data/imagenet"}}}
    assert paths.images_id(real).startswith("imagenet-")
    assert paths.images_source(real) == "/data/imagenet"
    # generator settings do not matter for a real source; conversion settings do
    assert paths.images_id(real) == paths.images_id({"data": {"images": {"source": "/data/imagenet", "count": 9}}})
    assert paths.images_id(real) != paths.images_id({"data": {"images": {"source": "/data/imagenet", "shards": 9}}})
    assert paths.text_settings({})["seq_len"] == 128
    assert paths.text_settings({"run": {"seq_len": 64}})["seq_len"] == 64
    assert paths.text_id({"run": {"seq_len": 64}}) != paths.text_id({})
    assert paths.dataset_files("pytorch", "text", {"data": {"text": {"corpus": "c.txt"}}})[-2].endswith("vocab.txt")


@pytest.mark.parametrize(
    "data,expected",
    [
        ({"images": {"count": 4, "classes": 8}}, "data.images.count: 4 images cannot fill data.images.classes: 8"),
        ({"images": {"splits": ["train", "val"], "val_count": 0}}, "data.images.val_count"),
        ({"text": {"seq_len": 32, "max_predictions": 30}}, "data.text.max_predictions: 30 exceeds seq_len - 3 (29)"),
        ({"text": {"seq_len": 4}}, "data.text.seq_len: 4"),
    ],
)
def test_config_problems_name_the_key(data, expected):
    assert expected in paths.config_problem({"data": data})


def test_config_without_problems():
    assert paths.config_problem({}) is None
    assert paths.config_problem({"data": {"images": {"source": "/x", "count": 1, "classes": 8}}}) is None


# ---- BERT examples (numpy part; the tokenizer runs in tests/frameworks/test_data_formats.py) ----


def token_documents(seed=0, documents=12, vocab=300):
    rng = np.random.default_rng(seed)
    return [
        [list(rng.integers(5, vocab, int(rng.integers(3, 25)))) for _ in range(int(rng.integers(1, 12)))]
        for _ in range(documents)
    ]


def check_examples(arrays, seq_len, max_predictions, vocab, masked_lm_prob=0.15):
    n = len(arrays["next_sentence_labels"])
    assert arrays["input_ids"].shape == arrays["input_mask"].shape == arrays["segment_ids"].shape == (n, seq_len)
    assert arrays["masked_lm_ids"].shape == arrays["masked_lm_weights"].shape == (n, max_predictions)
    ids, mask, segments = arrays["input_ids"], arrays["input_mask"], arrays["segment_ids"]
    assert ids.min() >= 0 and ids.max() < vocab <= bert.BERT_VOCAB_SIZE
    for i in range(n):
        length = int(mask[i].sum())
        assert (mask[i, :length] == 1).all() and (mask[i, length:] == 0).all() and (ids[i, length:] == 0).all()
        row = ids[i, :length]
        seps = np.flatnonzero(row == bert.SEP)
        assert row[0] == bert.CLS and row[-1] == bert.SEP and len(seps) == 2
        assert (segments[i, : seps[0] + 1] == 0).all() and (segments[i, seps[0] + 1 : length] == 1).all()
        assert (segments[i, length:] == 0).all()
        weights = arrays["masked_lm_weights"][i]
        k = int(weights.sum())
        assert k == min(max_predictions, max(1, round(length * masked_lm_prob)))
        assert (weights[:k] == 1).all() and (weights[k:] == 0).all()
        positions = arrays["masked_lm_positions"][i, :k]
        assert (np.diff(positions) > 0).all() and positions.min() > 0 and positions.max() < length - 1
        assert not np.isin(positions, seps).any()
        originals = arrays["masked_lm_ids"][i, :k]
        assert (originals >= 5).all() and (originals < vocab).all()
    # 80 % of the predictions are [MASK] in the input, the rest original or random words
    predicted = arrays["masked_lm_weights"] > 0
    at = np.take_along_axis(ids, arrays["masked_lm_positions"], axis=1)[predicted]
    assert 0.7 < (at == bert.MASK).mean() < 0.9
    assert 0.3 < arrays["next_sentence_labels"].mean() < 0.7


def test_bert_examples_shapes_ranges_and_masking():
    arrays = bert.make_examples(
        token_documents(),
        examples=200,
        seq_len=48,
        max_predictions=6,
        masked_lm_prob=0.15,
        short_seq_prob=0.1,
        vocab_size=300,
        seed=1,
    )
    check_examples(arrays, 48, 6, 300)
    labels = bert.mlm_labels(arrays)
    assert labels.shape == (200, 48) and ((labels != -100).sum(axis=1) == arrays["masked_lm_weights"].sum(axis=1)).all()
    again = bert.make_examples(
        token_documents(),
        examples=200,
        seq_len=48,
        max_predictions=6,
        masked_lm_prob=0.15,
        short_seq_prob=0.1,
        vocab_size=300,
        seed=1,
    )
    assert all((arrays[k] == again[k]).all() for k in arrays)


def test_bert_npz_is_deterministic_and_checked(tmp_path):
    arrays = bert.make_examples(
        token_documents(2),
        examples=16,
        seq_len=32,
        max_predictions=5,
        masked_lm_prob=0.15,
        short_seq_prob=0.1,
        vocab_size=300,
        seed=0,
    )
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        bert.save_npz(tmp_path / name / bert.EXAMPLES_NAME, arrays)
    assert (tmp_path / "a/examples.npz").read_bytes() == (tmp_path / "b/examples.npz").read_bytes()
    loaded = bert.load_examples(tmp_path / "a")
    assert all((loaded[k] == arrays[k]).all() and loaded[k].dtype == arrays[k].dtype for k in arrays)
    bert.save_npz(tmp_path / "b" / bert.EXAMPLES_NAME, {k: v for k, v in arrays.items() if k != "segment_ids"})
    with pytest.raises(DataError, match="examples.npz: missing fields segment_ids"):
        bert.load_examples(tmp_path / "b")
    with pytest.raises(DataError, match=f"{tmp_path / 'c' / 'examples.npz'}: BERT examples file not found"):
        bert.load_examples(tmp_path / "c")


def test_default_corpus_is_english_prose():
    description, text = bert.default_corpus()
    documents = bert.read_documents(text)
    sentences = [s for d in documents for s in d]
    assert "pydoc_data" in description and len(documents) > 50 and len(sentences) > 1000
    assert not any("::=" in s or s.startswith(">>>") for s in sentences)
    words = " ".join(sentences).split()
    assert sum(w.lower() in {"the", "is", "a", "of", "to"} for w in words) / len(words) > 0.1


def test_manifest_files_are_json(generated):
    assert json.loads((generated / "manifest.json").read_text())["schema"] == "dlbench.dataset/1"


# ---- the LLMs' byte-level tokens ----


def test_llm_token_paths_follow_corpus_and_seq_len():
    config = {"run": {"seq_len": 64}}
    files = paths.train_data_inputs("jax", "llama_small", config)
    assert files == paths.train_data_inputs("pytorch", "llama3_8b", config)  # one file for every framework
    assert [os.path.basename(p) for p in files] == ["tokens.npy", "manifest.json"]
    assert files[0].startswith("results/data/tokens/bytes-")
    assert paths.token_settings({}) == {"corpus": None, "seq_len": 2048}  # the Llamas' default
    assert paths.tokens_id(config) not in (paths.tokens_id({}), paths.tokens_id({"data": {"text": {"corpus": "c"}}}))


def test_llm_tokens_are_packed_bytes_with_document_ends(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("héllo world\n\nsecond document here\n\n\nthird")
    manifest = tokens.build(tmp_path / "out", str(corpus), 7)
    rows, loaded = tokens.load(tmp_path / "out", 7, 32000)
    stream = rows.reshape(-1)
    expected = [*"héllo world".encode(), 256, *b"second document here", 256, *b"third", 256]
    assert rows.shape == (len(expected) // 8, 8) and rows.dtype == np.uint16
    assert stream.tolist() == expected[: rows.size]
    assert manifest["documents"] == 3 and loaded["corpus_sha256"] == manifest["corpus_sha256"]
    with pytest.raises(DataError, match=r"tokens.npy: uint16\[5, 8\], expected uint16 \[N, 65\]"):
        tokens.load(tmp_path / "out", 64, 32000)
    with pytest.raises(DataError, match="vocabulary of 257 exceeds the model's 100"):
        tokens.load(tmp_path / "out", 7, 100)
    with pytest.raises(DataError, match="cannot fill one sequence of 4097"):
        tokens.build(tmp_path / "short", str(corpus), 4096)


def test_default_llm_corpus_is_pydoc_data_and_deterministic(tmp_path):
    first = tokens.build(tmp_path / "a", None, 512)
    again = tokens.build(tmp_path / "b", None, 512)
    assert first["corpus"]["name"].startswith("pydoc_data.topics") and first["documents"] > 50
    assert first["files"] == again["files"]  # same bytes, same sha256
    assert first["count"] == (first["corpus_bytes"] + first["documents"]) // 513
