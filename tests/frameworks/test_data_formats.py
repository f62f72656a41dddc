"""Each framework's dataset format, written and read in that framework's own environment.

A small generated ImageNet-layout dataset is converted by the rules' scripts (one framework
python each, as the pipeline runs them); then every framework decodes every image with its
own decoder — tf.io.decode_jpeg on the TFRecord bytes, PIL through torchvision's ImageFolder,
mx.image.imdecode on the RecordIO records — and the labels must agree exactly, the pixels
within decoder differences. These tests run in the analysis environment; everything that
needs a framework runs in a subprocess of that framework's python.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

from dlbench.data import DataError, bert, imagefolder, imagenet, recordio, tfrecord
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python

FRAMEWORKS = ("tensorflow", "pytorch", "mxnet")
SCRIPTS = {"tensorflow": "convert_tfrecord.py", "pytorch": "convert_imagefolder.py", "mxnet": "convert_recordio.py"}
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV, "TF_CPP_MIN_LOG_LEVEL": "2"}
SPLITS = ["train", "val"]

pytestmark = pytest.mark.skipif(
    not all(framework_python(name).exists() for name in FRAMEWORKS),
    reason="needs the tensorflow, pytorch and mxnet environments",
)


def run(framework: str, *args: str, code: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = [str(framework_python(framework))]
    command += ["-c", textwrap.dedent(code)] if code else list(args)
    result = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert result.returncode == 0, result.stderr[-4000:]
    return result


def convert(framework: str, source, out, check: bool = True) -> subprocess.CompletedProcess:
    args = [str(REPO / "workflow/scripts" / SCRIPTS[framework]), "--source", str(source), "--out", str(out)]
    args += ["--splits", *SPLITS]
    if framework != "pytorch":
        args += ["--seed", "5"]
    if framework == "tensorflow":
        args += ["--shards", "3", "--val-shards", "1"]
    return run(framework, *args, check=check)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "imagenet"
    imagenet.generate(root, count=18, classes=3, image_size=40, seed=1, val_count=5)
    return root


@pytest.fixture(scope="module")
def converted(source):
    out = source.parent / "converted"
    for framework in FRAMEWORKS:
        convert(framework, source, out / framework)
    return out


READERS = {
    "tensorflow": "examples = tfrecord.read_examples(out, split)",
    "pytorch": "examples = imagefolder.read_examples(out, split)",
    "mxnet": "examples = recordio.read_examples(out, split)",
}


@pytest.fixture(scope="module")
def decoded(converted):
    """framework → split → filename → (label, image), each decoded by the framework itself."""
    results = {}
    for framework in FRAMEWORKS:
        target = converted / f"{framework}.decoded.npz"
        code = f"""
            import json, os, numpy as np
            from dlbench.data import imagefolder, recordio, tfrecord, imagenet
            out = {str(converted / framework)!r}
            arrays, index = {{}}, {{}}
            for split in {SPLITS!r}:
                {READERS[framework]}
                if "filename" not in examples[0]:  # RecordIO: the file name is in the .lst
                    with open(os.path.join(out, split + ".lst")) as f:
                        names = [os.path.basename(line.split("\\t")[2].strip()) for line in f]
                    for example in examples:
                        example["filename"] = names[example["id"]]
                for i, example in enumerate(examples):
                    arrays[f"{{split}}/{{i}}"] = example["image"]
                index[split] = [
                    [e["filename"], e["label"], e.get("stored_label"), e.get("synset")]
                    + [__import__("hashlib").sha256(e.get("encoded") or e.get("bytes") or b"").hexdigest()]
                    for e in examples
                ]
            np.savez({str(target)!r}, **arrays)
            print(json.dumps(index))
        """
        index = json.loads(run(framework, code=code).stdout.strip().splitlines()[-1])
        with np.load(target) as arrays:
            results[framework] = {
                split: {
                    name: {
                        "label": label,
                        "stored_label": stored,
                        "synset": synset,
                        "sha256": digest,
                        "image": arrays[f"{split}/{i}"],
                        "order": i,
                    }
                    for i, (name, label, stored, synset, digest) in enumerate(rows)
                }  # fmt: skip
                for split, rows in index.items()
            }
    return results


def source_labels(source, split):
    wnids = imagenet.class_names(source)
    return {entry.filename: entry for entry in imagenet.scan(source, split, wnids)}


@pytest.mark.parametrize("split", SPLITS)
def test_all_formats_hold_every_image_with_the_same_label(source, decoded, split):
    truth = source_labels(source, split)
    for framework in FRAMEWORKS:
        got = decoded[framework][split]
        assert set(got) == set(truth), framework
        assert {name: v["label"] for name, v in got.items()} == {name: e.label for name, e in truth.items()}, framework
    tf_examples = decoded["tensorflow"][split].values()
    assert all(v["stored_label"] == v["label"] + tfrecord.LABEL_OFFSET for v in tf_examples)
    assert all(v["synset"] == truth[name].wnid for name, v in decoded["tensorflow"][split].items())


@pytest.mark.parametrize("split", SPLITS)
def test_stored_bytes_are_the_source_files_in_one_shared_order(source, decoded, split):
    truth = source_labels(source, split)
    for framework in ("tensorflow", "mxnet"):
        for name, value in decoded[framework][split].items():
            expected = hashlib.sha256((source / truth[name].path).read_bytes()).hexdigest()
            assert value["sha256"] == expected, (framework, name)
    order = {f: sorted(decoded[f][split], key=lambda n: decoded[f][split][n]["order"]) for f in ("tensorflow", "mxnet")}
    assert order["tensorflow"] == order["mxnet"]
    shuffled = [
        e.filename for e in imagenet.record_order(imagenet.scan(source, split, imagenet.class_names(source)), 5)
    ]
    assert order["mxnet"] == shuffled


@pytest.mark.parametrize("split", SPLITS)
def test_decoders_agree_on_pixels(decoded, split):
    reference = decoded["pytorch"][split]
    for framework in ("tensorflow", "mxnet"):
        diffs = []
        for name, value in decoded[framework][split].items():
            image, expected = value["image"], reference[name]["image"]
            assert image.dtype == expected.dtype == np.uint8
            assert image.shape == expected.shape and image.shape[2] == 3, (framework, name)
            diffs.append(np.abs(image.astype(np.int16) - expected.astype(np.int16)).mean())
        print(framework, split, f"mean abs diff: max {max(diffs):.3f}, mean {np.mean(diffs):.3f}")
        assert max(diffs) < 1.0, (framework, max(diffs))


def test_manifests(source, converted):
    for framework, module in (("tensorflow", tfrecord), ("mxnet", recordio), ("pytorch", imagefolder)):
        manifest = json.loads((converted / framework / "manifest.json").read_text())
        assert manifest["classes"] == imagenet.class_names(source)
        assert manifest["source"] == str(source)
        assert {s: v["count"] for s, v in manifest["splits"].items()} == {"train": 18, "val": 5}
        assert module.__name__.endswith(manifest["format"])
        for split in manifest["splits"].values():
            for entry in split.get("shards", split.get("files", [])):
                path = converted / framework / entry["path"]
                assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
    shards = json.loads((converted / "tensorflow" / "manifest.json").read_text())["splits"]["train"]["shards"]
    assert [s["path"] for s in shards] == [f"train-0000{i}-of-00003" for i in range(3)]
    assert [s["count"] for s in shards] == [6, 6, 6]
    assert os.readlink(converted / "pytorch" / "train") == os.path.relpath(source / "train", converted / "pytorch")


def corrupt_copy(source, tmp_path):
    """A copy whose one image passes the structural check but no decoder can decode."""
    root = tmp_path / "corrupt"
    shutil.copytree(source, root)
    bad = root / imagenet.scan(root, "train", imagenet.class_names(root))[4].path
    bad.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4 + b"\xff\xda" + b"\x12\x34" * 300 + b"\xff\xd9")
    return root, bad


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_undecodable_jpeg_fails_with_one_error_naming_the_file(source, tmp_path, framework):
    root, bad = corrupt_copy(source, tmp_path)
    result = convert(framework, root, tmp_path / "out", check=False)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "dlbench data error" in line]
    assert len(errors) == 1 and f"{bad}: corrupt image" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_missing_source_fails_naming_it(tmp_path):
    result = convert("pytorch", tmp_path / "nowhere", tmp_path / "out", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"dlbench data error: {tmp_path / 'nowhere'}: image dataset directory not found"
    )


def test_missing_or_empty_outputs_are_named_by_the_readers(converted, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(converted, copy, symlinks=True)
    (copy / "tensorflow" / "train-00001-of-00003").unlink()
    with pytest.raises(DataError, match="train-00001-of-00003: TFRecord shard not found"):
        tfrecord.shard_paths(copy / "tensorflow")
    (copy / "mxnet" / "train.idx").write_text("")
    with pytest.raises(DataError, match="train.idx: RecordIO file is empty"):
        recordio.split_files(copy / "mxnet")
    with pytest.raises(DataError, match="manifest not found"):
        tfrecord.shard_paths(tmp_path)
    (copy / "pytorch" / "val").unlink()
    with pytest.raises(DataError, match="pytorch/val: ImageFolder directory not found"):
        imagefolder.split_root(copy / "pytorch", "val")


def test_stdlib_recordio_reader_reads_mxnet_records(source, converted):
    rec, idx, lst = recordio.split_files(converted / "mxnet")
    lines = [line.split("\t") for line in open(lst).read().splitlines()]
    for key, offset in recordio.read_index(idx).items():
        (flag, label, index, _), data = recordio.read_raw(rec, offset)
        assert (flag, index, label) == (0, key, float(lines[key][1]))
        assert data == (source / "train" / lines[key][2]).read_bytes()


# ---- BERT pre-training data: built in PyTorch's environment, read in all three ----


@pytest.fixture(scope="module")
def bert_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    script = str(REPO / "workflow/scripts/bert_data.py")
    args = ["--examples", "64", "--seq-len", "64", "--max-predictions", "10", "--vocab-size", "2000"]
    for name in ("a", "b"):
        run("pytorch", script, *args, "--out", str(root / name))
    return root


def test_bert_data_is_deterministic(bert_data):
    for name in ("examples.npz", "vocab.txt", "corpus.txt"):
        assert (bert_data / "a" / name).read_bytes() == (bert_data / "b" / name).read_bytes(), name


def test_bert_examples_from_the_default_corpus(bert_data):
    from tests.test_datasets import check_examples

    manifest = json.loads((bert_data / "a" / "manifest.json").read_text())
    assert "pydoc_data" in manifest["corpus"] and manifest["count"] == 64
    vocab = (bert_data / "a" / "vocab.txt").read_text().splitlines()
    assert vocab[:5] == list(bert.SPECIAL_TOKENS) and len(vocab) == manifest["vocab_size"] <= 2000
    arrays = bert.load_examples(bert_data / "a")
    check_examples(arrays, 64, 10, len(vocab))
    words = [vocab[i] for i in arrays["input_ids"][arrays["input_mask"] > 0]]
    assert {"the", "of", "is"} <= set(words)


@pytest.mark.parametrize("framework", ("tensorflow", "mxnet"))
def test_bert_examples_load_in_the_other_frameworks(bert_data, framework):
    code = f"""
        from dlbench.data import bert
        arrays = bert.load_examples({str(bert_data / "a")!r})
        print(arrays["input_ids"].shape, int(arrays["masked_lm_weights"].sum()), int(bert.mlm_labels(arrays).max()))
    """
    shape, masked, top = run(framework, code=code).stdout.strip().rsplit(" ", 2)
    arrays = bert.load_examples(bert_data / "a")
    assert shape == "(64, 64)" and int(masked) == int(arrays["masked_lm_weights"].sum())
    assert int(top) == int(arrays["masked_lm_ids"].max())
