"""The model catalogue shared by every framework. Stdlib only.

A framework runner declares which of these it builds; sizes here are the defaults
the seeds used (224 px for ImageNet CNNs, 299 px for InceptionV3, sequence 128 for BERT,
2048 for the LLMs, whose shapes are dlbench.llm.SHAPES).
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
    # LLM pretraining (issue #27): throughput in tokens (dlbench.llm, docs/frameworks/llm.md).
    "llama3_8b": {"kind": "llm", "default_seq_len": 2048, "title": "Llama 3.1 8B"},
    "llama3_1b": {"kind": "llm", "default_seq_len": 2048, "title": "Llama 3.2 1B"},
    "llama_small": {"kind": "llm", "default_seq_len": 2048, "title": "Llama small (4 layers, 45 M)"},
}


def resolved_sizes(model: str, image_size: int = 0, seq_len: int = 0) -> tuple[int, int]:
    """(image size, sequence length) a run of `model` trains at: 0 means the catalogue's default
    (224 px, 299 for InceptionV3; 128 tokens for BERT). Planning resolves the sizes once
    (dlbench.planning.grid.planned_sizes); everything downstream is given them."""
    entry = CATALOGUE[model]
    return image_size or entry.get("default_image_size", 0), seq_len or entry.get("default_seq_len", 0)


def sample_unit(model: str) -> str:
    return {"text": "sequences", "llm": "tokens"}.get(CATALOGUE[model]["kind"], "images")


def samples_per_example(model: str, seq_len: int) -> int:
    """What one example of a batch counts in the step log's `samples`: its tokens for an LLM
    (throughput in tokens/s), else 1."""
    return seq_len if CATALOGUE.get(model, {}).get("kind") == "llm" else 1
