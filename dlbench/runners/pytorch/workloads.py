"""The PyTorch runner's workloads, one object per model kind (dlbench.runners.base.Workload):
torchvision CNNs with momentum SGD, Hugging Face BertForPreTraining with Adam, its own Llama
with AdamW (llm.py). Each builds its model, optimizer, batch source and loss; the runner
drives the one `WORKLOADS(model)` names. docs/frameworks/pytorch.md. Importing this module
does not import torch: the runner passes it in."""

from __future__ import annotations

from dlbench.coords import ACTIVATION_CHECKPOINTING
from dlbench.llm import SHAPES as LLM_SHAPES
from dlbench.recipe import ADAM_EPSILON, ADAM_LR, IMAGENET_MEAN, IMAGENET_STD, SGD_MOMENTUM, sgd_lr
from dlbench.runners.base import Workload, Workloads, run_training_options
from dlbench.runners.pytorch import models as nets
from dlbench.runners.pytorch import pipeline

WORKLOADS = Workloads("pytorch")

# What the header records of each activation-checkpointing mode (llm.Block).
CHECKPOINTING_RECORD = {
    "none": "none",
    "selective": "selective: each decoder block under torch.utils.checkpoint (non-reentrant), the outputs of "
    "matmuls, attention and collectives kept, the rest recomputed",
    "full": "full: each decoder block under torch.utils.checkpoint (non-reentrant), recomputed in the backward pass",
}


class TorchWorkload(Workload):
    """What every PyTorch workload offers the runner; `inputs` returns the real-data batches
    (an iterator) or keeps the synthetic batch on the device and returns None."""

    memory_format: str | None = None  # the header's memory_format
    # Under fp8, the linear layers kept in high precision: qualified names or their last parts.
    float8_keep: tuple[str, ...] = ()

    def __init__(self, spec, torch, device):
        self.spec, self.torch, self.device = spec, torch, device
        self.dataset = None  # the real dataset's header record, where the workload reads one

    @classmethod
    def import_framework(cls) -> None:
        """Import what the workload needs beyond torch."""

    def autocast_dtype(self, on_cuda: bool):
        """AMP's autocast dtype: float16 (with GradScaler) on CUDA, bfloat16 on the CPU."""
        torch = self.torch
        return torch.float16 if on_cuda else torch.bfloat16

    def optimizer(self, params, compiled: bool):
        """(optimizer, learning-rate schedule or None)."""
        raise NotImplementedError

    def step_tokens(self, batch):
        """The step's rows (a pipeline's schedule splits them into its micro-batches itself)."""
        return self.tokens if batch is None else batch[0]

    def micro_batches(self, batch, count: int) -> list:
        """The step's `count` micro-batches of `batch` (None: the synthetic batch), each as
        `loss` takes it; a workload that declares no accumulation has one, the batch."""
        return [batch]

    def describe(self) -> dict:
        return {"memory_format": self.memory_format}


@WORKLOADS.registers
class ImageClassification(TorchWorkload):
    """A torchvision CNN (channels-last) with momentum SGD and cross-entropy on 1000 classes."""

    kind = "image"
    models = tuple(nets.TORCHVISION_BUILDERS)
    memory_format = "channels_last"

    @classmethod
    def import_framework(cls) -> None:
        # Only the CNNs need it: importing torchvision imports torch._dynamo (its ops), about
        # as long again as torch itself.
        import torchvision  # noqa: F401

    def model(self):
        model = nets.image_model(self.spec.coords.model)
        return model.to(self.device, memory_format=self.torch.channels_last)

    def optimizer(self, params, compiled: bool):
        torch = self.torch
        self.loss_fn = torch.nn.CrossEntropyLoss()
        return torch.optim.SGD(params, lr=sgd_lr(self.spec), momentum=SGD_MOMENTUM, foreach=True), None

    def inputs(self, generator, strategy, real: bool):
        torch, spec, size = self.torch, self.spec, self.spec.image_size
        self.dali = False
        if real:
            self.dali = pipeline.use_dali(spec.device, spec.options["dali"])
            if self.dali:
                batches = pipeline.dali_loader(spec, size)
            else:
                batches = pipeline.forever(pipeline.image_loader(spec, self.device, size))
            self.mean = torch.tensor(IMAGENET_MEAN, device=self.device).view(1, 3, 1, 1)
            self.std = torch.tensor(IMAGENET_STD, device=self.device).view(1, 3, 1, 1)
            return batches
        images, labels = nets.image_batch(torch, spec, size, generator)
        self.images = images.to(self.device).contiguous(memory_format=torch.channels_last)
        self.labels = labels.to(self.device)
        return None

    def loss(self, model, batch=None):
        if batch is None:
            return self.loss_fn(model(self.images), self.labels)
        images, labels = batch
        images = images.contiguous(memory_format=self.torch.channels_last)
        if not self.dali:  # DALI batches arrive normalised
            images = images.float().sub_(self.mean).div_(self.std)
        return self.loss_fn(model(images), labels)

    def input_pipeline(self) -> str:
        if self.dali:
            return f"NVIDIA DALI (nvJPEG mixed decode, random crop, flip; {self.spec.data_workers} threads)"
        return f"DataLoader(ImageFolder, workers={self.spec.data_workers}), RandomResizedCrop + flip"


@WORKLOADS.registers
class BertPretraining(TorchWorkload):
    """BERT-base pre-training (masked LM + next sentence, Hugging Face) with Adam."""

    kind = "text"
    models = ("bert_base",)

    @classmethod
    def import_framework(cls) -> None:
        import transformers  # noqa: F401

    def model(self):
        return nets.bert_for_pretraining().to(self.device)

    def optimizer(self, params, compiled: bool):
        return self.torch.optim.Adam(params, lr=ADAM_LR, eps=ADAM_EPSILON, foreach=True), None

    def inputs(self, generator, strategy, real: bool):
        if real:
            return pipeline.forever(pipeline.text_loader(self.spec, self.device))
        batch = nets.pretraining_batch(self.torch, self.spec, generator)
        self.batch = {k: v.to(self.device) for k, v in batch.items()}
        return None

    def loss(self, model, batch=None):
        inputs = dict(self.batch) if batch is None else dict(zip(nets.PRETRAINING_FIELDS, batch, strict=True))
        labels, next_sentence = inputs.pop("labels"), inputs.pop("next_sentence_label")
        return nets.pretraining_loss(self.torch, model(**inputs), labels, next_sentence)

    def input_pipeline(self) -> str:
        return "DataLoader over tokenised examples in memory"


@WORKLOADS.registers
class CausalLM(TorchWorkload):
    """A Llama (llm.py) pre-trained with AdamW and a linear warm-up, on tokens of the global
    batch this rank's strategy shard reads."""

    kind = "llm"
    models = tuple(LLM_SHAPES)
    activation_checkpointing = ACTIVATION_CHECKPOINTING  # per decoder block (llm.Block)
    grad_accum = True
    # fp8: the blocks' projections in float8 (float8.py); the output head stays in bf16, as
    # torchtitan keeps its `output` (the logits' precision matters most to the loss).
    precisions = ("fp32", "amp", "fp8")
    float8_keep = ("head",)

    def autocast_dtype(self, on_cuda: bool):
        return self.torch.bfloat16  # pre-trained in bfloat16 on CUDA too: no loss scaling

    def model(self):
        from dlbench.runners.pytorch import llm

        # Built where it trains: Llama 3.2 1B's random init takes 16 s on two host
        # cores, then the copy; a GPU draws it in a moment.
        with self.torch.device(self.device):
            return llm.Llama(self.spec.coords.model, run_training_options(self.spec.coords).activation_checkpointing)

    def optimizer(self, params, compiled: bool):
        from dlbench.runners.pytorch import llm

        return llm.optimizer(params, compiled=compiled)

    def inputs(self, generator, strategy, real: bool):
        from dlbench.runners.pytorch import llm

        spec = self.spec
        if real:
            loader, self.dataset = pipeline.token_loader(spec, self.device, strategy.data_shard(spec))
            return pipeline.forever(loader)
        self.tokens = llm.tokens(spec, generator, strategy.data_shard(spec)).to(self.device)
        return None

    def step_tokens(self, batch):
        """The step's rows (a pipeline's schedule splits them into its micro-batches itself)."""
        return self.tokens if batch is None else batch[0]

    def micro_batches(self, batch, count: int) -> list:
        """Consecutive slices of the step's rows (the synthetic share or a real batch of
        batch × count × devices rows): micro-batch i is rows [i × rows / count, (i + 1) × rows / count)."""
        if count == 1:
            return [batch]
        tokens = self.tokens if batch is None else batch[0]
        return [[part] for part in tokens.chunk(count)]

    def loss(self, model, batch=None):
        from dlbench.runners.pytorch import llm

        return llm.loss(model, self.tokens if batch is None else batch[0])

    def input_pipeline(self) -> str:
        return "DataLoader over packed byte-level tokens in memory"

    def describe(self) -> dict:
        checkpointing, micro_batches = run_training_options(self.spec.coords)
        return {
            **super().describe(),
            "activation_checkpointing": CHECKPOINTING_RECORD[checkpointing],
            "grad_accum": micro_batches,
        }
