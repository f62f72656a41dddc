"""PyTorch real-data input pipelines: DataLoader over ImageFolder, NVIDIA DALI, tokenised BERT
examples, the LLMs' packed tokens (docs/frameworks/pytorch.md, docs/frameworks/llm.md).
Importing this module does not import torch."""

from __future__ import annotations

import importlib.util

from dlbench.recipe import IMAGENET_MEAN, IMAGENET_STD
from dlbench.runners.base import run_training_options


def use_dali(device: str, enabled: bool = True) -> bool:
    """Real images through NVIDIA DALI when it is installed and the run is on CUDA (as seed 002
    did), unless the `dali` option is off; the header's input_pipeline says which ran."""
    if device != "cuda" or not enabled:
        return False
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` package at all (a torch built on a system CUDA)
        return False


def _sampler(spec, dataset, index: int, count: int):
    if count == 1:
        return None
    from torch.utils.data.distributed import DistributedSampler

    return DistributedSampler(dataset, num_replicas=count, rank=index, shuffle=True, seed=spec.seed, drop_last=True)


def loader(spec, device, dataset, workers: int, shard=None, micro_batches: int = 1):
    """A DataLoader of `spec.batch` examples, this rank's shard under a distributed strategy;
    `shard`: the strategy's (index, count, devices) where the ranks of a tensor group read one
    shard of batch × devices examples (default: each rank its own); `micro_batches`: a step's
    (gradient accumulation), read as one batch that the step splits."""
    import torch
    from torch.utils.data import DataLoader

    index, count, devices = shard or (spec.dist.rank, spec.dist.world_size, 1)
    batch = spec.batch * devices * micro_batches
    sampler = _sampler(spec, dataset, index, count)
    if len(dataset) // count < batch:
        raise ValueError(
            f"{spec.data_dir}: {len(dataset)} examples cannot fill a batch of {batch} on each of {count} shards"
        )
    return DataLoader(
        dataset,
        batch_size=batch,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
        generator=torch.Generator().manual_seed(spec.seed),
    )


def image_loader(spec, device, size: int):
    """Decode + RandomResizedCrop + flip into uint8 tensors in `data_workers` processes."""
    from torchvision.transforms import v2

    from dlbench.data import imagefolder

    transform = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()])
    dataset = imagefolder.dataset(spec.data_dir, "train", transform=transform)
    dataset.loader = imagefolder.load_rgb  # names the file when a JPEG does not decode
    return loader(spec, device, dataset, spec.data_workers)


def dali_loader(spec, size: int):
    """NVIDIA DALI on a GPU (seed 002's default): the reader shards the ImageFolder tree by
    rank, nvJPEG decodes with a random crop ("mixed": on the GPU), then resize, flip and
    normalise on the GPU. Labels: sorted class directories, as ImageFolder's."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from dlbench.data import imagefolder

    dist = spec.dist

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
            mean=list(IMAGENET_MEAN),
            std=list(IMAGENET_STD),
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return normalised, labels.gpu()

    pipe = images()
    pipe.build()
    iterator = DALIGenericIterator(
        pipe, ["images", "labels"], reader_name="reader", last_batch_policy=LastBatchPolicy.DROP, auto_reset=True
    )
    return _dali_batches(iterator)


def text_loader(spec, device):
    """Tokenised examples (dlbench.data.bert) from memory: no decoding for workers to do."""
    import torch
    from torch.utils.data import TensorDataset

    from dlbench.data import bert

    arrays = bert.load_examples(spec.data_dir)
    fields = (
        arrays["input_ids"],
        arrays["segment_ids"],
        arrays["input_mask"],
        bert.mlm_labels(arrays),
        arrays["next_sentence_labels"].reshape(-1),
    )
    return loader(spec, device, TensorDataset(*(torch.from_numpy(a).long() for a in fields)), 0)


def token_loader(spec, device, shard):
    """(loader, the header's dataset record): the LLMs' packed tokens (dlbench.data.tokens),
    rows of seq_len + 1, from memory (a few MB: nothing for workers to do)."""
    import torch
    from torch.utils.data import TensorDataset

    from dlbench import llm
    from dlbench.data import tokens

    rows, manifest = tokens.load(spec.data_dir, spec.seq_len, llm.shape(spec.coords.model).vocab)
    dataset = TensorDataset(torch.from_numpy(rows.astype("int64")))
    micro_batches = run_training_options(spec.coords).grad_accum
    return loader(spec, device, dataset, 0, shard, micro_batches), tokens.header_record(manifest)


def _dali_batches(iterator):
    for (batch,) in iterator:  # one dict per pipeline (one pipeline per rank)
        yield batch["images"], batch["labels"].squeeze(-1).long()


def forever(batches):
    """Batches without end: a new epoch (new shuffle, new DistributedSampler order) each pass."""
    epoch = 0
    while True:
        if hasattr(batches.sampler, "set_epoch"):
            batches.sampler.set_epoch(epoch)
        yield from batches
        epoch += 1
