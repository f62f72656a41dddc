"""The layout torchvision.datasets.ImageFolder reads, checked and linked rather than copied.

The ImageNet layout already is ImageFolder's (`<split>/<wnid>/<file>`), so the "conversion"
decodes every image once with PIL (as ImageFolder's default loader will), then links
`<dir>/<split>` to the source's split directory (relative link inside one tree, absolute
to an external ImageNet) and writes a manifest with the count, the classes and the sha256
of the sorted `sha256  path` lines of the images (sha256sum's format).

`ImageFolder(<dir>/train)` then gives class_to_idx = the sorted wnids → 0-based labels,
the labels of the TFRecord (minus its offset) and RecordIO files.

torchvision and PIL are imported inside the functions.
"""

from __future__ import annotations

import hashlib
import os

from dlbench.data import DataError, imagenet, read_manifest, write_manifest


def _check_decodes(path: str) -> None:
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.convert("RGB").load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise DataError(f"{path}: corrupt image (PIL: {error})") from None


def _link(target: str, link: str) -> None:
    inside_one_tree = os.path.commonpath([target, os.path.abspath(link)]) != os.path.sep
    value = os.path.relpath(target, os.path.dirname(os.path.abspath(link))) if inside_one_tree else target
    tmp = link + ".tmp"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(value, tmp, target_is_directory=True)
    os.replace(tmp, link)


def convert(source: str | os.PathLike, out_dir: str | os.PathLike, *, splits) -> dict:
    """Check every image of each split, link `<out_dir>/<split>`, write the manifest."""
    source, out_dir = os.path.abspath(source), os.fspath(out_dir)
    wnids = imagenet.class_names(source)
    os.makedirs(out_dir, exist_ok=True)
    manifest_splits = {}
    for split in splits:
        lines = []
        for entry in imagenet.scan(source, split, wnids):
            path, data, _ = imagenet.read_image(source, entry)
            _check_decodes(path)
            lines.append(f"{hashlib.sha256(data).hexdigest()}  {entry.path}\n")
        _link(os.path.join(source, split), os.path.join(out_dir, split))
        manifest_splits[split] = {
            "count": len(lines),
            "root": split,
            "target": os.readlink(os.path.join(out_dir, split)),
            "images_sha256": hashlib.sha256("".join(sorted(lines)).encode()).hexdigest(),
        }
    return write_manifest(
        out_dir,
        {
            "format": "imagefolder",
            "layout": "torchvision.datasets.ImageFolder(<dir>/<split>) (links to the source, no copies)",
            "source": source,
            "classes": wnids,
            "label": "ImageFolder class_to_idx: 0-based index of the sorted wnid",
            "label_offset": 0,
            "splits": manifest_splits,
        },
    )


# ---- readers ----


def split_root(directory: str | os.PathLike, split: str = "train") -> str:
    """`<dir>/<split>` for ImageFolder; errors name the missing manifest, split or directory."""
    manifest = read_manifest(directory)
    if split not in manifest["splits"]:
        raise DataError(f"{directory}: no '{split}' split in the ImageFolder manifest")
    root = os.path.join(directory, split)
    if not os.path.isdir(root):
        raise DataError(f"{root}: ImageFolder directory not found (link to {manifest['source']}/{split} broken?)")
    return root


def load_rgb(path: str):
    """One image as PIL RGB (ImageFolder's default loader), a DataError naming the file when it
    does not decode (the PyTorch and PaddlePaddle pipelines' loader)."""
    from PIL import Image

    try:
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")
    except OSError as exc:
        raise DataError(f"{path}: cannot decode image: {exc}") from exc


def dataset(directory: str | os.PathLike, split: str = "train", transform=None):
    """torchvision ImageFolder over the split with the manifest's classes (so a val split
    that lacks some classes keeps train's labels); train's own classes must match them."""
    from torchvision.datasets import ImageFolder

    root = split_root(directory, split)
    classes = read_manifest(directory)["classes"]

    class Folder(ImageFolder):
        def find_classes(self, path):
            return list(classes), {wnid: label for label, wnid in enumerate(classes)}

    if split == "train" and ImageFolder.find_classes(None, root)[0] != classes:
        raise DataError(f"{root}: classes differ from the manifest's (source changed since conversion?)")
    return Folder(root, transform=transform, allow_empty=split != "train")


def read_examples(directory: str | os.PathLike, split: str = "train", filenames=None) -> list[dict]:
    """Decoded samples (PIL, RGB, as ImageFolder's default loader), all or those named."""
    import numpy as np

    folder = dataset(directory, split)
    wanted = None if filenames is None else set(filenames)
    examples = []
    for path, label in folder.samples:
        name = os.path.basename(path)
        if wanted is None or name in wanted:
            examples.append({"image": np.asarray(folder.loader(path)), "label": label, "filename": name})
    return examples
