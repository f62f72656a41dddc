"""The model kinds, one descriptor each: what a sample is, the size a model of the kind trains
at, how its training FLOPs are counted, the dataset it reads and the MFU planning assumes.
Stdlib only (imported inside the framework environments).

A catalogue entry (dlbench.models) names its kind; everything outside a framework's workloads
asks the model's descriptor (`dlbench.models.kind_of`), never the kind's name, so that a new
kind is one `ModelKind` registered here (or by a plug-in, `register_kind`), its catalogue
entries and one workload per framework that trains it (docs/plugins.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dlbench import llm, pipelining
from dlbench.recipe import BERT_BASE

SIZE_FIELDS = ("image_size", "seq_len")


@dataclass(frozen=True)
class ModelKind:
    name: str  # the catalogue entries' "kind"
    sample_unit: str  # what throughput counts: images, sequences, tokens
    size_field: str  # the size its models train at, one of SIZE_FIELDS; defaults per model
    # Training FLOPs (forward + backward) of one sample, in the kind's unit, framework
    # independent: (model, catalogue entry, size) -> FLOPs. `flops_method` says how, for
    # results/flops/<model>.json's counted_with.
    train_flops: Callable[[str, dict, int], float]
    flops_method: str
    # Share of a device's dense peak the cost estimate assumes where no campaign measured the cell.
    assumed_mfu: float
    # The converted dataset its real data is read from (dlbench.planning.datasets' formats);
    # `framework_images`: the one the framework declares (Capabilities.image_format) instead.
    dataset_format: str = ""
    framework_images: bool = False
    per_token: bool = False  # a sample is a token: an example of a batch counts its seq_len
    size_text: str = "{size}×{size} px images"  # the report's input sizes
    # How the report explains the FLOPs (a formula per sample); "": not explained.
    flops_note: str = ""
    # What a size cannot be for a model: (model, size) -> problem or None; None: any size.
    size_problem: Callable[[str, int], str | None] | None = None
    # Why `size` devices per node cannot split a model's blocks: (model, size) -> problem or
    # None; None: its models have no tensor-parallel split.
    tensor_parallel_problem: Callable[[str, int], str | None] | None = None
    # (model, schedule, pipeline ranks, batch, micro-batches) -> why it cannot be pipelined;
    # None: its models are not pipelined at all (dlbench.pipelining)
    pipeline_problem: Callable[[str, str, int, int, int], str | None] | None = None
    memory_estimate: bool = False  # planning/fit.py estimates its memory (dlbench.llm's shapes)
    # Precisions its models cannot train in, with why ({"fp8": ...}: float8 training converts
    # linear layers): a grid that asks for one is a planning error naming the model.
    unavailable_precisions: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.size_field not in SIZE_FIELDS:
            raise ValueError(f"model kind {self.name!r}: size_field {self.size_field!r} is not one of {SIZE_FIELDS}")
        if not 0 < self.assumed_mfu <= 1:
            raise ValueError(f"model kind {self.name!r}: assumed_mfu {self.assumed_mfu!r} is not a share")

    @property
    def default_key(self) -> str:
        """The catalogue entry's key of a model's default size: `default_image_size`, ..."""
        return f"default_{self.size_field}"

    def size(self, sizes: tuple[int, int]) -> int:
        """Its size out of (image size, sequence length)."""
        return sizes[SIZE_FIELDS.index(self.size_field)]


def cnn_train_flops(model: str, entry: dict, image_size: int) -> float:
    """3 × forward (backward is twice the forward) × 2 FLOPs per multiply-add, from the
    entry's published forward GMACs (torchvision's model pages' "GFLOPS" column) at its
    default image size, scaled by pixels at another (convolutions dominate)."""
    return 6e9 * entry["forward_gmacs"] * (image_size / entry["default_image_size"]) ** 2


def bert_train_flops(model: str, entry: dict, seq_len: int) -> float:
    """BERT-base pre-training per sequence, as dlbench.llm counts a decoder: 6 × the matmul
    parameters a token meets (encoder, and BertForPreTraining's MLM head at every position) +
    attention's 12 × layers × hidden × seq_len, per token."""
    hidden, layers, ffn = BERT_BASE["hidden_size"], BERT_BASE["num_hidden_layers"], BERT_BASE["intermediate_size"]
    encoder = layers * (4 * hidden * hidden + 2 * hidden * ffn)
    mlm_head = hidden * hidden + hidden * BERT_BASE["vocab_size"]
    return seq_len * (6.0 * (encoder + mlm_head) + 12.0 * layers * hidden * seq_len)


def llm_train_flops(model: str, entry: dict, seq_len: int) -> float:
    """Per token (an LLM's samples are tokens): PaLM's formula, dlbench.llm."""
    return llm.train_flops_per_token(model, seq_len)


KINDS: dict[str, ModelKind] = {}


def register_kind(kind: ModelKind) -> ModelKind:
    """Register a kind once (a plug-in's too); a second one of the same name is an error."""
    if kind.name in KINDS:
        raise ValueError(f"model kind {kind.name!r} is already registered")
    KINDS[kind.name] = kind
    return kind


# About the MFUs: what the committed campaigns measured (ResNet-50 on an H100: 10-14 %,
# Llama 3.2 1B on an H200: 30-34 %).
register_kind(
    ModelKind(
        "image",
        "images",
        "image_size",
        cnn_train_flops,
        "published forward MACs x 6 (forward + backward), scaled by pixels",
        assumed_mfu=0.12,
        framework_images=True,
        unavailable_precisions={
            "fp8": "float8 training converts a model's linear layers, and an image model computes in "
            "convolutions (its one linear layer is the classifier)"
        },
    )
)
register_kind(
    ModelKind(
        "text",
        "sequences",
        "seq_len",
        bert_train_flops,
        "6 x matmul parameters a token meets + 12 x layers x hidden x seq_len, per token, x seq_len",
        assumed_mfu=0.30,
        dataset_format="bert",
        size_text="sequences of {size} tokens",
    )
)
register_kind(
    ModelKind(
        llm.KIND,
        "tokens",
        "seq_len",
        llm_train_flops,
        "PaLM appendix B: 6 x matmul parameters + 12 x layers x hidden x seq_len, per token",
        assumed_mfu=0.30,
        dataset_format="tokens",
        per_token=True,
        size_text="sequences of {size} tokens",
        flops_note="6 × the matmul parameters (all but the input embedding) + 12 × layers × hidden × "
        "sequence length (PaLM, appendix B)",
        size_problem=llm.sequence_problem,
        tensor_parallel_problem=llm.tensor_parallel_problem,
        pipeline_problem=pipelining.pipeline_problem,
        memory_estimate=True,
    )
)
