"""PaddlePaddle runner: paddle.vision CNNs (NCHW, BatchNorm, Momentum SGD) and a paddle.nn
BERT-base (Adam), dynamic graph or `paddle.jit.to_static`, paddle.amp on GPUs, real images
through paddle.io.DataLoader (BERT examples in memory) and collective data
parallelism (paddle.DataParallel, Gloo on CPU, NCCL on GPU). docs/frameworks/paddle.md explains
the fast path, threads and the launch. Importing this package does not import Paddle:
`Runner.import_framework()` does, after setting what Paddle reads at start-up."""

from __future__ import annotations

import os

from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.base import address_space_capped
from dlbench.runners.paddle.reasons import AMP_CPU_REASON
from dlbench.runners.paddle.workloads import WORKLOADS
from dlbench.runners.plugin import Capabilities, Strategy

CAPABILITIES = Capabilities(
    label="PaddlePaddle",
    colour="#2ca02c",
    models=WORKLOADS.models,  # what its workloads train (workloads.py)
    precisions=("fp32", "amp"),
    cuda_only_precisions={"amp": AMP_CPU_REASON},
    # paddlepaddle-gpu 2.6.2, PyPI's newest CUDA build: the node needs CUDA 11.8 and cuDNN 8.6
    # (envs/paddle-cuda.in; docs/frameworks/paddle.md).
    device_envs={"cuda": "paddle-cuda"},
    data=("synthetic", "real"),
    image_format="imagefolder",  # and the BERT examples (format "bert")
    strategies=(
        Strategy(
            "collective",
            "PaddlePaddle collective data parallelism (paddle.DataParallel, one process per device): "
            "gradients all-reduced every step (Gloo on CPU, NCCL on GPU)",
        ),
    ),
)


class Runner(BaseRunner):
    def import_framework(self) -> None:
        if getattr(self, "paddle", None) is not None:
            return
        spec = self.spec
        # Paddle's CPU kernels size their OpenMP pools from this, read once at import.
        os.environ["OMP_NUM_THREADS"] = str(max(1, spec.threads))
        if spec.dist.world_size > 1:
            os.environ.update(rendezvous_environment(spec.dist, spec.device))
        import paddle

        self.paddle = paddle

    def build(self) -> None:
        self.import_framework()
        spec, paddle = self.spec, self.paddle
        paddle.set_device(f"gpu:{spec.dist.local_rank}" if spec.device == "cuda" else "cpu")
        if spec.dist.world_size > 1:
            paddle.distributed.init_parallel_env()
        self.real_data, self._last = spec.coords.data == "real", None
        # The run's model kind picks its workload (workloads.py): model, optimizer, loss, data.
        self.workload = workload = WORKLOADS(spec.coords.model)(spec)
        workload.build(paddle)
        self.trainer, self.params, self.prepare = workload.trainer, workload.params, workload.prepare
        self.batches, self.batch = workload.batches, workload.batch

    def next_batch(self):
        return next(self.batches) if self.real_data else None

    def step(self, batch=None):
        self._last = self.trainer.step(*(self.batch if batch is None else self.prepare(*batch)))
        return self._last

    def sync(self) -> None:
        # Paddle's CPU kernels run synchronously; on a GPU, wait for the queued work.
        if self.spec.device == "cuda":
            self.paddle.device.synchronize()

    def loss_value(self, handle) -> float:
        return float(handle)

    def is_oom(self, exc: BaseException) -> bool:
        text = str(exc)
        if isinstance(exc, MemoryError) or "ResourceExhaustedError" in text or "Out of memory" in text:
            return True
        return "bad_alloc" in text and address_space_capped()

    def describe(self) -> dict:
        paddle, spec = self.paddle, self.spec
        on_gpu = spec.device == "cuda"
        info = {
            "version": paddle.__version__,
            "commit": paddle.version.commit,
            "cuda": paddle.version.cuda() if on_gpu else None,
            "cudnn": paddle.version.cudnn() if on_gpu else None,
            "device_name": paddle.device.cuda.get_device_name() if on_gpu else "cpu",
            "processes": spec.dist.world_size,
            "threads": int(os.environ.get("OMP_NUM_THREADS", "0")),
            "memory_format": "NCHW",
        }
        if spec.dist.world_size > 1 and paddle.distributed.is_initialized():
            info["collective_backend"] = paddle.distributed.get_backend()
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            info.update(trainable_params=self.params, **trainer.describe())
        if getattr(self, "real_data", False):
            info["input_pipeline"] = self.workload.input_pipeline
        return info

    def close(self) -> None:
        paddle = getattr(self, "paddle", None)
        if paddle is not None and self.spec.dist.world_size > 1 and paddle.distributed.is_initialized():
            paddle.distributed.barrier()


def rendezvous_environment(dist, device: str) -> dict[str, str]:
    """What paddle.distributed.init_parallel_env reads, from dlbench's rank placement (not
    paddle.distributed.launch): rank 0's TCP store at master_addr:master_port; Gloo on the CPU,
    NCCL on the local rank's GPU."""
    env = {
        "PADDLE_TRAINER_ID": str(dist.rank),
        "PADDLE_TRAINERS_NUM": str(dist.world_size),
        "PADDLE_RANK_IN_NODE": str(dist.local_rank),
        "PADDLE_LOCAL_SIZE": str(dist.local_world_size),
        "MASTER_ADDR": dist.master_addr,
        "MASTER_PORT": str(dist.master_port),
        "PADDLE_MASTER": f"{dist.master_addr}:{dist.master_port}",
        # Checked for presence only: the process group meets through the TCP store.
        "PADDLE_CURRENT_ENDPOINT": f"{dist.node}:{dist.master_port + 1 + dist.rank}",
    }
    if device == "cuda":
        env["FLAGS_selected_gpus"] = str(dist.local_rank)
    else:
        env["PADDLE_DISTRI_BACKEND"] = "gloo"
    return env
