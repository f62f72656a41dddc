"""Datasets for real-data runs: generation, each framework's native format, readers.

Modules imported inside the framework environments (everything here) use the standard
library and numpy at module level only; each framework is imported inside the functions
that need it, so `dlbench.data.tfrecord` imports (and its readers' helpers work) in any
environment.

    imagenet     the ImageNet directory layout: generation, scanning, labels, record order
    tfrecord     TFRecord shards as tf_cnn_benchmarks / build_imagenet_data.py write them
    recordio     MXNet RecordIO (.rec/.idx/.lst) as `im2rec --pass-through` writes them
    imagefolder  the layout torchvision's ImageFolder reads (checked, linked, not copied)
    bert         masked-LM + next-sentence pre-training examples (create_pretraining_data.py)
    paths        where each framework's dataset lives for a config; a train job's inputs
"""

from __future__ import annotations

import json
import os

from dlbench.files import write_atomically
from dlbench.provenance import sha256_file

MANIFEST_NAME = "manifest.json"
MANIFEST_SCHEMA = "dlbench.dataset/1"


class DataError(Exception):
    """A dataset problem, said in one line that names the file or directory."""


def file_entry(path: str | os.PathLike, root: str | os.PathLike) -> dict:
    """{path (relative to root), bytes, sha256} of one output file."""
    return {
        "path": os.path.relpath(path, root),
        "bytes": os.path.getsize(path),
        "sha256": sha256_file(path),
    }


def write_manifest(directory: str | os.PathLike, manifest: dict) -> dict:
    """Write `manifest.json` last (atomically): its presence says the outputs are complete."""
    path = os.path.join(directory, MANIFEST_NAME)
    manifest = {"schema": MANIFEST_SCHEMA, **manifest}
    write_atomically(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def read_manifest(directory: str | os.PathLike) -> dict:
    path = os.path.join(directory, MANIFEST_NAME)
    if not os.path.isfile(path):
        raise DataError(f"{path}: dataset manifest not found (convert the dataset first)")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as error:
        raise DataError(
            f"{path}: cannot be read as a dataset manifest ({error}); remove {directory} to convert it again"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        found = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise DataError(f"{path}: unknown manifest schema {found!r}")
    return manifest


def require_file(path: str | os.PathLike, what: str = "file") -> str:
    """The path, or one DataError naming it when it is missing or empty."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: {what} not found")
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: {what} is empty")
    return path


def run_job(job) -> dict:
    """Run one data job (a rule's script); a DataError ends the process with exit status 1
    and one line on stderr naming the file, instead of a traceback."""
    import sys

    try:
        manifest = job()
    except DataError as error:
        print(f"dlbench data error: {error}", file=sys.stderr)
        sys.exit(1)
    counts = {split: values["count"] for split, values in manifest.get("splits", {}).items()}
    print(f"dlbench data: wrote {manifest['format']}: {counts or manifest.get('count')}")
    return manifest
