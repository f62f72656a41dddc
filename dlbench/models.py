"""The model catalogue shared by every framework. Stdlib only.

A framework runner declares which of these it builds; sizes here are the defaults
the seeds used (224 px for ImageNet CNNs, 299 px for InceptionV3, sequence 128 for BERT).
"""

from __future__ import annotations

IMAGE_CLASSES = 1000

CATALOGUE: dict[str, dict] = {
    "resnet50": {"kind": "image", "default_image_size": 224, "title": "ResNet-50"},
    "resnet152": {"kind": "image", "default_image_size": 224, "title": "ResNet-152"},
    "vgg16": {"kind": "image", "default_image_size": 224, "title": "VGG-16"},
    "inception_v3": {"kind": "image", "default_image_size": 299, "title": "InceptionV3"},
    "alexnet": {"kind": "image", "default_image_size": 224, "title": "AlexNet"},
    "bert_base": {"kind": "text", "default_seq_len": 128, "title": "BERT-base"},
}


def resolved_sizes(model: str, image_size: int = 0, seq_len: int = 0) -> tuple[int, int]:
    """(image size, sequence length) a run of `model` trains at: 0 means the catalogue's default
    (224 px, 299 for InceptionV3; 128 tokens for BERT). The one place a size default is
    resolved: RunSpec's constructor and the FLOPs count call it."""
    entry = CATALOGUE[model]
    return image_size or entry.get("default_image_size", 0), seq_len or entry.get("default_seq_len", 0)


def sample_unit(model: str) -> str:
    return "sequences" if CATALOGUE[model]["kind"] == "text" else "images"
