"""The ImageNet directory layout: generation, scanning, labels and the record order.

Layout (ILSVRC2012 as extracted, validation restructured into class folders the way
torchvision's ImageFolder and most training scripts expect it):

    <root>/train/<wnid>/<wnid>_<n>.JPEG
    <root>/val/<wnid>/ILSVRC2012_val_<8 digits>.JPEG      (optional)
    <root>/labels.txt                                      (generated datasets: wnid<TAB>label)

Labels: the classes are the sorted names of the directories in `train/` (torchvision
ImageFolder's `class_to_idx`, and the synset order of tf_cnn_benchmarks /
build_imagenet_data.py's synsets file, which is sorted too); a class's label is its 0-based
index in that order. Every format keeps this mapping; TFRecord stores label + 1 (see
`tfrecord.LABEL_OFFSET`), as build_imagenet_data.py does.

Record order: the sorted file list shuffled once with `random.Random(seed)`; record i of
the RecordIO file is example i of the TFRecord shards read in shard order.

Stdlib + numpy at module level; PIL only inside `generate` (the analysis environment).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
from dataclasses import dataclass

import numpy as np

from dlbench.data import DataError, write_manifest

SPLITS = ("train", "val")
IMAGE_EXTENSIONS = (".jpeg", ".jpg")
LABELS_NAME = "labels.txt"
JPEG_SOI = b"\xff\xd8\xff"
JPEG_SOS = b"\xff\xda"
JPEG_EOI = b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Generated images: each edge is drawn from [SIZE_RANGE[0], SIZE_RANGE[1]] x image_size, so
# aspect ratios vary and a random-resized crop has something to crop.
SIZE_RANGE = (0.8, 1.25)
_SPLIT_CODE = {"train": 1, "val": 2}


@dataclass(frozen=True)
class Entry:
    """One image: its path relative to the dataset root, its class and 0-based label."""

    path: str
    wnid: str
    label: int

    @property
    def filename(self) -> str:
        return os.path.basename(self.path)


# ---- labels ----


def synthetic_wnids(classes: int) -> list[str]:
    """WordNet-id-shaped class names for a generated dataset (n9xxxxxxx: no real synset)."""
    return [f"n{90_000_000 + k:08d}" for k in range(classes)]


def _listing(directory: str) -> list[os.DirEntry]:
    """The entries of a directory; one DataError naming it when it cannot be read."""
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError as error:
        raise DataError(f"{directory}: cannot read this directory ({error.strerror})") from None


def class_names(root: str | os.PathLike) -> list[str]:
    """The sorted class directories of `<root>/train` (the label of each is its index)."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise DataError(f"{root}: image dataset directory not found")
    train = os.path.join(root, "train")
    if not os.path.isdir(train):
        raise DataError(f"{train}: training image directory not found (expected <root>/train/<wnid>/*.JPEG)")
    wnids = sorted(entry.name for entry in _listing(train) if entry.is_dir() and not entry.name.startswith("."))
    if not wnids:
        raise DataError(f"{train}: no class directories (expected <root>/train/<wnid>/*.JPEG)")
    return wnids


def write_labels(path: str | os.PathLike, wnids: list[str]) -> None:
    with open(path, "w") as f:
        f.writelines(f"{wnid}\t{label}\n" for label, wnid in enumerate(wnids))


def read_labels(path: str | os.PathLike) -> dict[str, int]:
    labels = {}
    with open(path) as f:
        for line in f:
            wnid, label = line.split()
            labels[wnid] = int(label)
    return labels


# ---- scanning ----


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS) and not name.startswith(".")


def scan(root: str | os.PathLike, split: str, wnids: list[str]) -> list[Entry]:
    """Every image of `split`, sorted by (class, file name); errors name the directory.

    `train` must have at least one image in every class (as ImageFolder requires); `val`
    may lack classes but may not have classes `train` does not have.
    """
    root = os.fspath(root)
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    split_dir = os.path.join(root, split)
    if not os.path.isdir(split_dir):
        raise DataError(f"{split_dir}: image directory of split '{split}' not found")
    labels = {wnid: label for label, wnid in enumerate(wnids)}
    present = sorted(entry.name for entry in _listing(split_dir) if entry.is_dir() and not entry.name.startswith("."))
    unknown = [wnid for wnid in present if wnid not in labels]
    if unknown:
        raise DataError(f"{os.path.join(split_dir, unknown[0])}: class not in train/ ({len(unknown)} such)")
    entries = []
    for wnid in wnids:
        class_dir = os.path.join(split_dir, wnid)
        if not os.path.isdir(class_dir):
            if split == "train":
                raise DataError(f"{class_dir}: class directory not found")
            continue
        names = sorted(entry.name for entry in _listing(class_dir) if entry.is_file() and _is_image(entry.name))
        if not names and split == "train":
            raise DataError(f"{class_dir}: no JPEG images in this class directory")
        entries += [Entry(f"{split}/{wnid}/{name}", wnid, labels[wnid]) for name in names]
    if not entries:
        raise DataError(f"{split_dir}: no JPEG images")
    return entries


def record_order(entries: list[Entry], seed: int) -> list[Entry]:
    """The order of the records in TFRecord shards and RecordIO files (a fixed shuffle)."""
    order = list(entries)
    random.Random(seed).shuffle(order)
    return order


def plan(root: str | os.PathLike, splits, seed: int) -> tuple[list[str], dict[str, list[Entry]]]:
    """The classes and, per split, the images in record order: what every converter writes."""
    wnids = class_names(root)
    return wnids, {split: record_order(scan(root, split, wnids), seed) for split in splits}


def shard_ranges(count: int, shards: int) -> list[tuple[int, int]]:
    """[start, end) of each shard: contiguous, sizes differing by at most one."""
    bounds = [count * i // shards for i in range(shards + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


# ---- checks every converter applies ----


def check_image_bytes(path: str | os.PathLike, data: bytes) -> str:
    """'jpeg' or 'png' (the one PNG in ILSVRC2012 train is named .JPEG), else DataError.

    Structural check only (the converter's framework decoder does the rest): a JPEG starts
    with SOI and has an EOI marker after its last start-of-scan (entropy-coded data cannot
    contain FF D9), which catches truncated files that OpenCV would silently grey-fill.
    """
    if not data:
        raise DataError(f"{path}: corrupt image (empty file)")
    if data.startswith(PNG_SIGNATURE):
        return "png"
    if not data.startswith(JPEG_SOI):
        raise DataError(f"{path}: corrupt image (not a JPEG: starts with {data[:4].hex()})")
    last_scan = data.rfind(JPEG_SOS)
    if last_scan < 0 or data.rfind(JPEG_EOI) < last_scan:
        raise DataError(f"{path}: corrupt image (truncated JPEG: no end-of-image marker after the last scan)")
    return "jpeg"


def read_image(root: str | os.PathLike, entry: Entry) -> tuple[str, bytes, str]:
    """(absolute path, the file's bytes, 'jpeg' | 'png') after the structural check."""
    path = os.path.join(root, entry.path)
    with open(path, "rb") as f:
        data = f.read()
    return path, data, check_image_bytes(path, data)


# ---- generation ----


def _smooth_noise(rng: np.random.Generator, height: int, width: int, cells: int) -> np.ndarray:
    """Values in [0, 1]: a coarse random grid, bilinearly upsampled (separable, numpy only)."""
    grid = rng.random((cells + 1, cells + 1, 3))
    ys, xs = np.linspace(0, cells, height), np.linspace(0, cells, width)
    y0, x0 = np.minimum(ys.astype(int), cells - 1), np.minimum(xs.astype(int), cells - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    top = grid[y0][:, x0] * (1 - fx) + grid[y0][:, x0 + 1] * fx
    bottom = grid[y0 + 1][:, x0] * (1 - fx) + grid[y0 + 1][:, x0 + 1] * fx
    return top * (1 - fy) + bottom * fy


def synthetic_image(seed: int, split: str, label: int, n: int, image_size: int) -> np.ndarray:
    """A deterministic uint8 HxWx3 image of class `label`: a class-coloured grating at a
    class orientation and frequency, blended with smooth noise and fine grain."""
    cls = np.random.default_rng([seed, 0xC1A55, label])
    palette = cls.random((2, 3))
    frequency, angle = cls.uniform(2.0, 7.0), cls.uniform(0, np.pi)
    rng = np.random.default_rng([seed, _SPLIT_CODE[split], label, n])
    height, width = (max(8, round(image_size * rng.uniform(*SIZE_RANGE))) for _ in range(2))
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    theta = angle + rng.normal(0, 0.2)
    phase = 2 * np.pi * (frequency * (x * np.cos(theta) + y * np.sin(theta)) + rng.random())
    grating = (0.5 + 0.5 * np.sin(phase))[..., None]
    image = palette[0] * (1 - grating) + palette[1] * grating
    image = 0.6 * image + 0.4 * _smooth_noise(rng, height, width, int(rng.integers(2, 7)))
    image += rng.normal(0, 0.03, image.shape)
    return np.clip(np.rint(image * 255), 0, 255).astype(np.uint8)


def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def generated_name(split: str, wnid: str, n: int, index: int) -> str:
    """ImageNet's file names: train `<wnid>_<n>.JPEG`, val `ILSVRC2012_val_<index>.JPEG`."""
    return f"{wnid}_{n}.JPEG" if split == "train" else f"ILSVRC2012_val_{index:08d}.JPEG"


def generate(
    root: str | os.PathLike,
    *,
    count: int,
    classes: int,
    image_size: int,
    seed: int,
    quality: int = 90,
    val_count: int = 0,
) -> dict:
    """Write a generated ImageNet-layout dataset; the same arguments give the same bytes.

    Image i of a split goes to class i mod `classes`, so classes differ by at most one image.
    Each image depends only on (seed, split, class, its number in the class): adding images
    does not change the existing ones.
    """
    if classes < 1 or count < classes:
        raise DataError(f"{root}: {count} images cannot fill {classes} classes (need count >= classes >= 1)")
    root = os.fspath(root)
    wnids = synthetic_wnids(classes)
    os.makedirs(root, exist_ok=True)
    splits = {"train": count, **({"val": val_count} if val_count else {})}
    lines = []
    for split, total in splits.items():
        for i in range(total):
            label, n = i % classes, i // classes
            wnid = wnids[label]
            relpath = f"{split}/{wnid}/{generated_name(split, wnid, n, i + 1)}"
            data = encode_jpeg(synthetic_image(seed, split, label, n, image_size), quality)
            os.makedirs(os.path.join(root, split, wnid), exist_ok=True)
            with open(os.path.join(root, relpath), "wb") as f:
                f.write(data)
            lines.append(f"{hashlib.sha256(data).hexdigest()}  {relpath}\n")
    write_labels(os.path.join(root, LABELS_NAME), wnids)
    return write_manifest(
        root,
        {
            "format": "imagenet",
            "generator": {
                "count": count,
                "val_count": val_count,
                "classes": classes,
                "image_size": image_size,
                "size_range": list(SIZE_RANGE),
                "seed": seed,
                "quality": quality,
            },
            "classes": wnids,
            "labels": LABELS_NAME,
            "splits": {split: {"count": total} for split, total in splits.items()},
            # sha256 of the sorted "sha256  path" lines of every image (sha256sum's format)
            "images_sha256": hashlib.sha256("".join(sorted(lines)).encode()).hexdigest(),
        },
    )
