"""PyTorch runner: torchvision CNNs (SGD with momentum), Hugging Face BertForPreTraining
(Adam), DDP across devices.

The best-known fast path is used: channels-last memory format for CNNs, a synthetic
batch created once on the device, `zero_grad(set_to_none=True)`, foreach optimizer,
bf16 autocast on CPU / fp16 autocast + GradScaler on CUDA, optional `torch.compile`.
"""

from __future__ import annotations

import os

from dlbench.models import CATALOGUE, IMAGE_CLASSES
from dlbench.runners.base import Runner as BaseRunner

FRAMEWORK = "pytorch"
MODELS = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet", "bert_base")
UNAVAILABLE: dict[str, str] = {}
STRATEGIES = ("ddp",)
PRECISIONS = ("fp32", "amp")

_TORCHVISION_BUILDERS = {
    "resnet50": ("resnet50", {}),
    "resnet152": ("resnet152", {}),
    "vgg16": ("vgg16", {}),
    # aux_logits off: the auxiliary head is a training-time regulariser whose cost
    # the CAICT/tf_cnn numbers do not include either.
    "inception_v3": ("inception_v3", {"aux_logits": False, "init_weights": True}),
    "alexnet": ("alexnet", {}),
}


class Runner(BaseRunner):
    def import_framework(self) -> None:
        import torch  # noqa: F401
        import torchvision  # noqa: F401

        if self.spec.coords.model == "bert_base":
            import transformers  # noqa: F401

    def build(self) -> None:
        import torch
        import torchvision

        spec = self.spec
        self.torch = torch
        torch.manual_seed(spec.seed)
        torch.set_num_threads(spec.threads)
        on_cuda = spec.device == "cuda"
        if on_cuda:
            torch.cuda.set_device(spec.dist.local_rank)
            self.device = torch.device("cuda", spec.dist.local_rank)
            torch.backends.cudnn.benchmark = True
        else:
            self.device = torch.device("cpu")

        self.distributed = spec.dist.world_size > 1
        if self.distributed:
            import torch.distributed as dist

            os.environ.setdefault("MASTER_ADDR", spec.dist.master_addr)
            os.environ.setdefault("MASTER_PORT", str(spec.dist.master_port))
            dist.init_process_group(
                backend="nccl" if on_cuda else "gloo",
                rank=spec.dist.rank,
                world_size=spec.dist.world_size,
            )

        self.is_text = CATALOGUE[spec.coords.model]["kind"] == "text"
        if self.is_text:
            model = _bert_for_pretraining().to(self.device)
        else:
            name, kwargs = _TORCHVISION_BUILDERS[spec.coords.model]
            model = getattr(torchvision.models, name)(weights=None, num_classes=IMAGE_CLASSES, **kwargs)
            model = model.to(self.device, memory_format=torch.channels_last)
        self.params = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if self.distributed:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=[spec.dist.local_rank] if on_cuda else None)
        if spec.compile:
            model = torch.compile(model)
        self.model = model.train()
        generator = torch.Generator().manual_seed(spec.seed)
        if self.is_text:
            self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
            self.inputs = {k: v.to(self.device) for k, v in _pretraining_batch(torch, spec, generator).items()}
        else:
            self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
            self.loss_fn = torch.nn.CrossEntropyLoss()
            size = spec.image_size or CATALOGUE[spec.coords.model]["default_image_size"]
            images = torch.randn(spec.batch, 3, size, size, generator=generator)
            labels = torch.randint(0, IMAGE_CLASSES, (spec.batch,), generator=generator)
            self.images = images.to(self.device).contiguous(memory_format=torch.channels_last)
            self.labels = labels.to(self.device)

        amp = spec.coords.precision == "amp"
        self.autocast_dtype = (torch.float16 if on_cuda else torch.bfloat16) if amp else None
        self.scaler = torch.amp.GradScaler("cuda") if amp and on_cuda else None

    def _loss(self):
        if self.is_text:
            return self.model(**self.inputs).loss
        return self.loss_fn(self.model(self.images), self.labels)

    def step(self, batch=None):
        torch = self.torch
        self.optimizer.zero_grad(set_to_none=True)
        if self.autocast_dtype is not None:
            with torch.autocast(self.device.type, dtype=self.autocast_dtype):
                loss = self._loss()
        else:
            loss = self._loss()
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def loss_value(self, handle) -> float:
        return float(handle)

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        oom_types = (getattr(self.torch, "OutOfMemoryError", ()),) if hasattr(self, "torch") else ()
        text = str(exc)
        return isinstance(exc, oom_types) or "out of memory" in text or "DefaultCPUAllocator: can't allocate" in text

    def describe(self) -> dict:
        torch = self.torch
        info = {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "device_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(),
            "trainable_params": self.params,
            "memory_format": None if self.is_text else "channels_last",
        }
        if self.device.type == "cuda":
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        return info

    def close(self) -> None:
        if getattr(self, "distributed", False):
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _bert_for_pretraining():
    """BERT-base (uncased) pre-training model from its configuration: masked-LM and
    next-sentence heads, MLM decoder tied to the word embeddings (110.1 M parameters)."""
    from transformers import BertConfig, BertForPreTraining

    config = BertConfig(
        vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    )
    return BertForPreTraining(config)


def _pretraining_batch(torch, spec, generator) -> dict:
    """A synthetic pre-training batch: random tokens, 15 % of positions masked-LM targets,
    random next-sentence labels; sentence B is the second half of the sequence."""
    batch, seq = spec.batch, spec.seq_len or CATALOGUE["bert_base"]["default_seq_len"]
    input_ids = torch.randint(1000, 30522, (batch, seq), generator=generator)
    masked = torch.rand(batch, seq, generator=generator) < 0.15
    labels = torch.where(masked, input_ids, torch.full_like(input_ids, -100))
    input_ids = torch.where(masked, torch.full_like(input_ids, 103), input_ids)  # [MASK]
    token_type_ids = torch.zeros(batch, seq, dtype=torch.long)
    token_type_ids[:, seq // 2 :] = 1
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        "labels": labels,
        "next_sentence_label": torch.randint(0, 2, (batch,), generator=generator),
    }
