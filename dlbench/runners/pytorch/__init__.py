"""PyTorch runner: torchvision CNNs (SGD with momentum), Hugging Face BertForPreTraining
(Adam), DDP across devices.

The best-known fast path is used: channels-last memory format for CNNs, a synthetic
batch created once on the device, `zero_grad(set_to_none=True)`, foreach optimizer,
bf16 autocast on CPU / fp16 autocast + GradScaler on CUDA, optional `torch.compile`.

Real data (`data: real`), as NVIDIA's and PyTorch's ImageNet examples feed a GPU: a
`DataLoader` over the ImageFolder tree with `data_workers` worker processes that decode
and augment (RandomResizedCrop, horizontal flip) into uint8 tensors, a
`DistributedSampler` under DDP (each rank its own shard), pinned memory and non-blocking
copies on CUDA; conversion to float, normalisation and channels-last run on the device
inside the step. BERT reads the tokenised examples (dlbench.data.bert) from memory.
"""

from __future__ import annotations

import os

from dlbench.models import CATALOGUE, IMAGE_CLASSES
from dlbench.runners.base import Runner as BaseRunner

FRAMEWORK = "pytorch"
MODELS = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet", "bert_base")
UNAVAILABLE: dict[str, str] = {}
STRATEGIES = ("ddp", "horovod")
PRECISIONS = ("fp32", "amp")
DATA = ("synthetic", "real")


def _horovod_unavailable() -> str:
    from dlbench.runners._horovod import UNAVAILABLE

    return UNAVAILABLE


# Horovod does not build against the locked torch (README, Strategies): its cells say why.
UNAVAILABLE_STRATEGIES = {"horovod": _horovod_unavailable()}
# ImageNet's per-channel mean and standard deviation (0-255 scale), as torchvision's models expect.
_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)

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

        self.horovod = spec.coords.strategy == "horovod"
        self.distributed = spec.dist.world_size > 1 and not self.horovod
        if self.horovod:
            self._init_horovod()
        elif self.distributed:
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
        self.real_data = spec.coords.data == "real"
        self.dali = False
        if self.is_text:
            self.optimizer = self._distributed_optimizer(torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True))
            if self.real_data:
                self.batches = _forever(self._text_loader())
            else:
                self.inputs = {k: v.to(self.device) for k, v in _pretraining_batch(torch, spec, generator).items()}
        else:
            self.optimizer = self._distributed_optimizer(
                torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
            )
            self.loss_fn = torch.nn.CrossEntropyLoss()
            size = spec.image_size or CATALOGUE[spec.coords.model]["default_image_size"]
            if self.real_data:
                self.dali = use_dali(spec.device)
                self.batches = self._dali_loader(size) if self.dali else _forever(self._image_loader(size))
                self.mean = torch.tensor(_MEAN, device=self.device).view(1, 3, 1, 1)
                self.std = torch.tensor(_STD, device=self.device).view(1, 3, 1, 1)
            else:
                images = torch.randn(spec.batch, 3, size, size, generator=generator)
                labels = torch.randint(0, IMAGE_CLASSES, (spec.batch,), generator=generator)
                self.images = images.to(self.device).contiguous(memory_format=torch.channels_last)
                self.labels = labels.to(self.device)

        amp = spec.coords.precision == "amp"
        self.autocast_dtype = (torch.float16 if on_cuda else torch.bfloat16) if amp else None
        self.scaler = torch.amp.GradScaler("cuda") if amp and on_cuda else None

    # --------------------------------------------------------------- horovod
    def _init_horovod(self) -> None:
        """Horovod over Gloo (NCCL on GPUs) without horovodrun (dlbench.runners._horovod)."""
        from dlbench.runners import _horovod

        self.hvd, self._rendezvous = _horovod.start("horovod.torch", self.spec.dist)

    def _distributed_optimizer(self, optimizer):
        """Horovod: all-reduce gradients in the optimizer; every rank starts from rank 0's state."""
        if not self.horovod:
            return optimizer
        hvd = self.hvd
        hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return hvd.DistributedOptimizer(optimizer, named_parameters=self.model.named_parameters())

    # ------------------------------------------------------------- real data
    def _sampler(self, dataset):
        if self.spec.dist.world_size == 1:
            return None
        from torch.utils.data.distributed import DistributedSampler

        dist = self.spec.dist
        return DistributedSampler(
            dataset, num_replicas=dist.world_size, rank=dist.rank, shuffle=True, seed=self.spec.seed, drop_last=True
        )

    def _loader(self, dataset, workers: int):
        from torch.utils.data import DataLoader

        sampler = self._sampler(dataset)
        if len(dataset) // max(1, self.spec.dist.world_size) < self.spec.batch:
            raise ValueError(
                f"{self.spec.data_dir}: {len(dataset)} examples cannot fill a batch of {self.spec.batch} "
                f"on each of {self.spec.dist.world_size} ranks"
            )
        return DataLoader(
            dataset,
            batch_size=self.spec.batch,
            shuffle=sampler is None,
            sampler=sampler,
            num_workers=workers,
            pin_memory=self.device.type == "cuda",
            drop_last=True,
            persistent_workers=workers > 0,
            prefetch_factor=4 if workers > 0 else None,
            generator=self.torch.Generator().manual_seed(self.spec.seed),
        )

    def _image_loader(self, size: int):
        from torchvision.transforms import v2

        from dlbench.data import imagefolder

        transform = v2.Compose(
            [v2.PILToTensor(), v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()]
        )
        dataset = imagefolder.dataset(self.spec.data_dir, "train", transform=transform)
        dataset.loader = _load_rgb  # names the file when a JPEG does not decode
        return self._loader(dataset, self.spec.data_workers)

    def _dali_loader(self, size: int):
        """NVIDIA DALI on a GPU (seed 002's default): the reader shards the ImageFolder tree by
        rank, nvJPEG decodes with a random crop ("mixed": on the GPU), then resize, flip and
        normalise on the GPU. Labels: sorted class directories, as ImageFolder's."""
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        from dlbench.data import imagefolder

        spec, dist = self.spec, self.spec.dist

        @pipeline_def(batch_size=spec.batch, num_threads=spec.data_workers, device_id=dist.local_rank, seed=spec.seed)
        def images():
            jpegs, labels = fn.readers.file(
                file_root=imagefolder.split_root(spec.data_dir, "train"),
                random_shuffle=True,
                shard_id=dist.rank,
                num_shards=dist.world_size,
                name="reader",
            )
            decoded = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
            resized = fn.resize(decoded, resize_x=size, resize_y=size)
            normalised = fn.crop_mirror_normalize(
                resized,
                dtype=types.FLOAT,
                output_layout="CHW",
                mean=list(_MEAN),
                std=list(_STD),
                mirror=fn.random.coin_flip(probability=0.5),
            )
            return normalised, labels.gpu()

        pipe = images()
        pipe.build()
        loader = DALIGenericIterator(
            pipe, ["images", "labels"], reader_name="reader", last_batch_policy=LastBatchPolicy.DROP, auto_reset=True
        )
        return _dali_batches(loader)

    def _text_loader(self):
        from torch.utils.data import TensorDataset

        from dlbench.data import bert

        arrays = bert.load_examples(self.spec.data_dir)
        torch = self.torch
        fields = (
            arrays["input_ids"],
            arrays["segment_ids"],
            arrays["input_mask"],
            bert.mlm_labels(arrays),
            arrays["next_sentence_labels"].reshape(-1),
        )
        # Tokenised examples sit in memory: no decoding for workers to do.
        return self._loader(TensorDataset(*(torch.from_numpy(a).long() for a in fields)), 0)

    def next_batch(self):
        if not self.real_data:
            return None
        batch = next(self.batches)
        return [t.to(self.device, non_blocking=True) for t in batch]

    def _loss(self, batch=None):
        if self.is_text:
            if batch is None:
                return self.model(**self.inputs).loss
            input_ids, token_type_ids, attention_mask, labels, next_sentence = batch
            return self.model(
                input_ids=input_ids,
                token_type_ids=token_type_ids,
                attention_mask=attention_mask,
                labels=labels,
                next_sentence_label=next_sentence,
            ).loss
        if batch is None:
            return self.loss_fn(self.model(self.images), self.labels)
        images, labels = batch
        images = images.contiguous(memory_format=self.torch.channels_last)
        if not self.dali:  # DALI batches arrive normalised
            images = images.float().sub_(self.mean).div_(self.std)
        return self.loss_fn(self.model(images), labels)

    def step(self, batch=None):
        torch = self.torch
        self.optimizer.zero_grad(set_to_none=True)
        if self.autocast_dtype is not None:
            with torch.autocast(self.device.type, dtype=self.autocast_dtype):
                loss = self._loss(batch)
        else:
            loss = self._loss(batch)
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
        if getattr(self, "real_data", False):
            if self.is_text:
                info["input_pipeline"] = "DataLoader over tokenised examples in memory"
            elif self.dali:
                info["input_pipeline"] = (
                    f"NVIDIA DALI (nvJPEG mixed decode, random crop, flip; {self.spec.data_workers} threads)"
                )
            else:
                info["input_pipeline"] = (
                    f"DataLoader(ImageFolder, workers={self.spec.data_workers}), RandomResizedCrop + flip"
                )
        if self.device.type == "cuda":
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        return info

    def close(self) -> None:
        if getattr(self, "horovod", False) and hasattr(self, "hvd"):
            self.hvd.shutdown()
            if getattr(self, "_rendezvous", None) is not None:
                self._rendezvous.stop()
        if getattr(self, "distributed", False):
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def use_dali(device: str) -> bool:
    """Real images through NVIDIA DALI when it is installed and the run is on CUDA (as seed 002
    did), unless DLBENCH_DALI=0; the header's input_pipeline says which ran."""
    if device != "cuda" or os.environ.get("DLBENCH_DALI", "1") == "0":
        return False
    import importlib.util

    return importlib.util.find_spec("nvidia.dali") is not None


def _dali_batches(loader):
    for (batch,) in loader:  # one dict per pipeline (one pipeline per rank)
        yield batch["images"], batch["labels"].squeeze(-1).long()


def _forever(loader):
    """Batches without end: a new epoch (new shuffle, new DistributedSampler order) each pass."""
    epoch = 0
    while True:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def _load_rgb(path: str):
    from PIL import Image

    from dlbench.data import DataError

    try:
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")
    except OSError as exc:
        raise DataError(f"{path}: cannot decode image: {exc}") from exc


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
