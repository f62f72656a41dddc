"""Paddle's real-data input pipeline: paddle.io.DataLoader over the ImageFolder layout
(dlbench.data.imagefolder: `<split>/<wnid>/<file>`, labels = the manifest's sorted classes),
decode + RandomResizedCrop + flip in worker processes, uint8 NCHW batches; each rank reads its
own shard (DistributedBatchSampler). Imports Paddle: only `Runner.build` imports this module."""

from __future__ import annotations

import numpy as np
import paddle
from paddle.io import DataLoader, DistributedBatchSampler
from paddle.vision import transforms
from paddle.vision.datasets import DatasetFolder

from dlbench.data import DataError, imagefolder, read_manifest


def _chw_uint8(image) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(image, dtype=np.uint8).transpose(2, 0, 1))


def image_dataset(data_dir: str, size: int) -> DatasetFolder:
    """The train split with its transform; its classes must be the manifest's."""
    root = imagefolder.split_root(data_dir, "train")
    transform = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), _chw_uint8])
    dataset = DatasetFolder(root, loader=imagefolder.load_rgb, transform=transform)
    if dataset.classes != list(read_manifest(data_dir)["classes"]):
        raise DataError(f"{root}: classes differ from the manifest's (source changed since conversion?)")
    return dataset


def image_loader(spec, size: int) -> DataLoader:
    """`spec.batch` images a step, this rank's shard, `spec.data_workers` worker processes."""
    dataset = image_dataset(spec.data_dir, size)
    dist = spec.dist
    if len(dataset) // dist.world_size < spec.batch:
        raise ValueError(
            f"{spec.data_dir}: {len(dataset)} examples cannot fill a batch of {spec.batch} "
            f"on each of {dist.world_size} ranks"
        )
    sampler = DistributedBatchSampler(
        dataset, batch_size=spec.batch, num_replicas=dist.world_size, rank=dist.rank, shuffle=True, drop_last=True
    )
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=spec.data_workers,
        use_shared_memory=spec.data_workers > 0,
        persistent_workers=spec.data_workers > 0,
    )


def forever(loader: DataLoader):
    """Batches without end: a new epoch (a new shuffle of each rank's shard) each pass."""
    epoch = 0
    while True:
        loader.batch_sampler.set_epoch(epoch)
        for images, labels in loader:
            yield images, paddle.reshape(labels, [-1]).astype("int64")
        epoch += 1
