"""The model catalogue shared by every framework. Stdlib only.

A framework runner declares which of these it builds. Each entry names its kind (a
dlbench.model_kinds descriptor, which everything outside the workloads asks through `kind_of`)
and the default of the size that kind trains at (`default_<size_field>`): 224 px for ImageNet
CNNs, 299 px for InceptionV3, sequence 128 for BERT, 2048 for the LLMs, whose shapes are
dlbench.llm.SHAPES. Planning resolves the sizes once (dlbench.planning.grid.planned_sizes).
An image model also gives its published forward GMACs at its default size (its FLOPs).
"""

from __future__ import annotations

from dlbench.model_kinds import KINDS, ModelKind

IMAGE_CLASSES = 1000

CATALOGUE: dict[str, dict] = {
    "resnet50": {"kind": "image", "default_image_size": 224, "forward_gmacs": 4.09, "title": "ResNet-50"},
    "resnet152": {"kind": "image", "default_image_size": 224, "forward_gmacs": 11.51, "title": "ResNet-152"},
    "vgg16": {"kind": "image", "default_image_size": 224, "forward_gmacs": 15.47, "title": "VGG-16"},
    "inception_v3": {"kind": "image", "default_image_size": 299, "forward_gmacs": 5.71, "title": "InceptionV3"},
    "alexnet": {"kind": "image", "default_image_size": 224, "forward_gmacs": 0.71, "title": "AlexNet"},
    "bert_base": {"kind": "text", "default_seq_len": 128, "title": "BERT-base"},
    # LLM pretraining: throughput in tokens (dlbench.llm, docs/frameworks/llm.md).
    "llama3_8b": {"kind": "llm", "default_seq_len": 2048, "title": "Llama 3.1 8B"},
    "llama3_1b": {"kind": "llm", "default_seq_len": 2048, "title": "Llama 3.2 1B"},
    "llama_small": {"kind": "llm", "default_seq_len": 2048, "title": "Llama small (4 layers, 45 M)"},
}


def kind_of(model: str) -> ModelKind:
    """The descriptor of `model`'s kind: the one place a catalogue entry's kind is read."""
    return KINDS[CATALOGUE[model]["kind"]]


def register_model(name: str, entry: dict) -> None:
    """Add a model to the catalogue (a plug-in's, before its Capabilities name it): its kind
    registered, the default of the kind's size given."""
    if name in CATALOGUE:
        raise ValueError(f"model {name!r} is already in the catalogue")
    kind = KINDS.get(entry.get("kind", ""))
    if kind is None:
        raise ValueError(f"model {name!r}: kind {entry.get('kind')!r} is not a registered kind ({sorted(KINDS)})")
    if not isinstance(entry.get(kind.default_key), int) or entry[kind.default_key] <= 0:
        raise ValueError(f"model {name!r}: {kind.default_key} must be a positive whole number")
    CATALOGUE[name] = {"title": name, **entry}


def sample_unit(model: str) -> str:
    return kind_of(model).sample_unit


def samples_per_example(model: str, seq_len: int) -> int:
    """What one example of a batch counts in the step log's `samples`: its tokens for a kind
    whose samples are tokens (an LLM: throughput in tokens/s), else 1."""
    return seq_len if model in CATALOGUE and kind_of(model).per_token else 1


def train_flops_per_sample(model: str, sizes: tuple[int, int]) -> float:
    """Training FLOPs (forward + backward) of one sample in the model's unit (an LLM's: a
    token) at the planned (image size, sequence length): its kind's counter."""
    kind = kind_of(model)
    return kind.train_flops(model, CATALOGUE[model], kind.size(sizes))
