"""PyTorch runner: torchvision model definitions, SGD with momentum, DDP across devices.

The best-known fast path is used: channels-last memory format for CNNs, a synthetic
batch created once on the device, `zero_grad(set_to_none=True)`, foreach optimizer,
bf16 autocast on CPU / fp16 autocast + GradScaler on CUDA, optional `torch.compile`.
"""

from __future__ import annotations

import os

from dlbench.models import CATALOGUE, IMAGE_CLASSES
from dlbench.runners.base import Runner as BaseRunner

FRAMEWORK = "pytorch"
MODELS = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet")
UNAVAILABLE = {"bert_base": "PyTorch BERT-base runner not built yet"}
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
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
        self.loss_fn = torch.nn.CrossEntropyLoss()

        size = spec.image_size or CATALOGUE[spec.coords.model]["default_image_size"]
        generator = torch.Generator().manual_seed(spec.seed)
        images = torch.randn(spec.batch, 3, size, size, generator=generator)
        labels = torch.randint(0, IMAGE_CLASSES, (spec.batch,), generator=generator)
        self.images = images.to(self.device).contiguous(memory_format=torch.channels_last)
        self.labels = labels.to(self.device)

        amp = spec.coords.precision == "amp"
        self.autocast_dtype = (torch.float16 if on_cuda else torch.bfloat16) if amp else None
        self.scaler = torch.amp.GradScaler("cuda") if amp and on_cuda else None

    def step(self):
        torch = self.torch
        self.optimizer.zero_grad(set_to_none=True)
        if self.autocast_dtype is not None:
            with torch.autocast(self.device.type, dtype=self.autocast_dtype):
                loss = self.loss_fn(self.model(self.images), self.labels)
        else:
            loss = self.loss_fn(self.model(self.images), self.labels)
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
            "memory_format": "channels_last",
        }
        if self.device.type == "cuda":
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        return info

    def close(self) -> None:
        if getattr(self, "distributed", False):
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
