"""Apache MXNet 1.9 runner: Gluon model-zoo CNNs, an own Gluon BERT-base, kvstore
`dist_sync` / `device` / `nccl` and Horovod. docs/frameworks/mxnet.md explains the fast path,
the models, the input pipelines and the strategies. Importing this package does not import
MXNet: it is imported in `Runner.import_framework()`, after the variables MXNet reads once at
import (OMP_NUM_THREADS, MXNET_CPU_WORKER_NTHREADS, DMLC_*) are set from the spec."""

from __future__ import annotations

import os
import sys

from dlbench.runners import _cuda_wheels, _horovod
from dlbench.runners._hyperparameters import loss_scaling_record, optimizer_record
from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.mxnet import strategies
from dlbench.runners.mxnet.workloads import WORKLOADS
from dlbench.runners.plugin import Capabilities, Option, ProcessLayout, Strategy

# mxnet-cu112's libmxnet.so's CUDA libraries, dependencies first (envs/mxnet-cuda.in).
CUDA_LIBRARIES = (
    "libcudart.so.11.0",
    "libnvrtc.so.11.2",
    "libcublasLt.so.11",
    "libcublas.so.11",
    "libcusparse.so.11",
    "libcusolver.so.11",
    "libcufft.so.10",
    "libcurand.so.10",
    "libcudnn.so.8",
    "libnccl.so.2",
    "libnvToolsExt.so.1",
)
# How a step's end is waited for (docs/frameworks/mxnet.md): every engine op, or the last loss only.
SYNC_MODES = ("waitall", "loss")
# An mx.optimizer.Optimizer's scalar attributes that are not settings: its update counters,
# rescale_grad, which the Trainer sets to 1 / batch at every step, and lr_scheduler (the schedule).
_NOT_SETTINGS = {"num_update", "begin_num_update", "rescale_grad", "lr_scheduler"}

CAPABILITIES = Capabilities(
    label="MXNet",
    colour="#1f77b4",
    models=WORKLOADS.models,  # what its workloads train (workloads.py)
    precisions=("fp32", "amp"),
    data=("synthetic", "real"),
    image_format="recordio",
    converts=("recordio",),
    strategies=(
        Strategy("dist_sync", "MXNet KVStore dist_sync: synchronous data parallelism through a parameter server"),
        # kvstore device/nccl: one process drives the node's devices (a list of contexts).
        Strategy(
            "device",
            "MXNet KVStore device: one process per node drives its devices, gradients summed on a device",
            layout=ProcessLayout.PER_NODE,
            single_node=True,
        ),
        Strategy(
            "nccl",
            "MXNet KVStore nccl: one process per node drives its devices, gradients all-reduced with NCCL",
            layout=ProcessLayout.PER_NODE,
            single_node=True,
            cuda_only=strategies.CUDA_ONLY["nccl"],
        ),
        _horovod.strategy(),
    ),
    device_envs={"cuda": "mxnet-cuda"},  # envs/mxnet-cuda.txt (docs/gpu.md)
    options=(
        Option(
            "sync",
            "waitall",
            "how a step's end is waited for: waitall (mx.nd.waitall, every engine op) or loss (its last loss)",
            choices=SYNC_MODES,
        ),
    ),
)

# What sync() waits for (docs/frameworks/mxnet.md): the last step's loss, or every queued operator.
# MXNet's fused self-attention kernels are float32-only on the CPU and missing from AMP's
# bfloat16 lists (they would get bfloat16 inputs and fail).
_CPU_FP32_ATTENTION_OPS = ["_contrib_interleaved_matmul_selfatt_qk", "_contrib_interleaved_matmul_selfatt_valatt"]


class Runner(BaseRunner):
    def import_framework(self) -> None:
        """Set what MXNet reads at import, start the parameter server, import MXNet."""
        if getattr(self, "mx", None) is not None:
            return
        spec = self.spec
        self.strategy = strategies.for_run(spec, CAPABILITIES.strategy_names)
        self.trainer = None
        self._pending = None  # the losses of the last step, until sync() waits for them
        self.sync_mode = spec.options["sync"]
        self.strategy.check(spec)
        if "mxnet" in sys.modules:
            # Thread and DMLC variables are read once, at import: too late to set them now.
            print("[dlbench] mxnet: already imported; thread settings may not apply", file=sys.stderr)
        # Each device's operators get its share of the process's threads; one engine worker
        # thread per CPU device (MXNet's default; more workers oversubscribe the cores).
        os.environ["OMP_NUM_THREADS"] = str(max(1, spec.threads // self.strategy.devices(spec)))
        os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
        self.strategy.before_import(spec)
        if spec.device == "cuda":  # the CUDA 11 libraries libmxnet.so needs, from their wheels
            _cuda_wheels.preload(CUDA_LIBRARIES)

        import mxnet as mx
        import mxnet.gluon.model_zoo.vision  # noqa: F401

        self.mx = mx
        self.strategy.after_import(mx, spec)
        self.ctxs = self.strategy.contexts(mx, spec)
        self.ctx = self.ctxs[0]
        for ctx in self.ctxs:
            self._start_device(ctx)

    def _start_device(self, ctx) -> None:
        """Run a few tiny operators so that MXNet starts its engine threads, the OpenMP team,
        OpenBLAS and oneDNN now: created lazily under the worker's address-space cap (applied
        after import_framework), they would abort the process instead of raising."""
        mx = self.mx
        x = mx.nd.ones((64, 64), ctx=ctx)
        y = mx.nd.dot(x, x) + mx.nd.ones((1 << 18,), ctx=ctx).sum()
        z = mx.nd.Convolution(
            mx.nd.ones((1, 3, 8, 8), ctx=ctx),
            mx.nd.ones((4, 3, 3, 3), ctx=ctx),
            kernel=(3, 3),
            num_filter=4,
            no_bias=True,
        )
        (y.sum() + z.sum()).wait_to_read()
        mx.nd.waitall()

    def build(self) -> None:
        self.import_framework()
        spec, mx = self.spec, self.mx
        mx.random.seed(spec.seed, ctx="all")
        self._init_amp()
        # The run's model kind picks its workload (workloads.py): network, data, optimizer, loss.
        self.workload = workload = WORKLOADS(spec.coords.model)(spec, mx, self.ctxs)
        self.real_data = spec.coords.data == "real"
        if self.real_data:  # a missing or empty dataset stops the run before the model is built
            workload.open_data(self.strategy.shard(spec))
        self.data = workload.data
        self.net = net = workload.net()
        self.replicas = workload.synthetic_batch()
        self.loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        # Deferred shapes: one forward pass fixes every parameter shape (in training mode,
        # so the cached graph is the one the steps use; no backward, no update).
        with mx.autograd.record():
            for inputs, _ in self.replicas:
                net(*inputs)
        mx.nd.waitall()
        self.params = sum(int(p.data(self.ctx).size) for p in net.collect_params().values() if p.grad_req != "null")
        optimizer, opt_args = workload.optimizer()
        self.trainer, self.step_batch = self.strategy.trainer(mx, net, optimizer, opt_args, spec, self.ctxs)
        on_cuda = spec.device == "cuda"
        if self.amp is not None and on_cuda:
            self.amp.init_trainer(self.trainer)  # dynamic loss scaling for float16
        self.scale_loss = self.amp is not None and on_cuda
        if self.real_data:
            workload.start_data(self.strategy.shard(spec))

    def _init_amp(self) -> None:
        """mxnet.contrib.amp: bfloat16 on the CPU, float16 on CUDA. Must run before the model
        is built: it patches the operator namespaces."""
        self.amp, self.amp_dtype = None, None
        if self.spec.coords.precision != "amp":
            return
        from mxnet.contrib import amp

        on_cuda = self.spec.device == "cuda"
        self.amp, self.amp_dtype = amp, "float16" if on_cuda else "bfloat16"
        fp32_ops = None if on_cuda else amp.list_fp32_ops(amp.amp.bfloat16) + _CPU_FP32_ATTENTION_OPS
        amp.init(target_dtype=self.amp_dtype, fp32_ops=fp32_ops)

    def next_batch(self):
        """Real data: [(inputs, labels)] per context, on the contexts (copies queued on the
        engine); the time spent here is the step's data wait. Synthetic: None."""
        return self.data.next() if self.real_data else None

    def _loss(self, inputs, labels):
        return self.workload.loss(self.loss_fn, self.net, inputs, labels)

    def step(self, batch=None):
        mx = self.mx
        replicas = self.replicas if batch is None else batch
        with mx.autograd.record():
            losses = [self._loss(inputs, labels) for inputs, labels in replicas]
        if self.scale_loss:
            with self.amp.scale_loss(losses, self.trainer) as scaled:
                mx.autograd.backward(scaled)
        else:
            mx.autograd.backward(losses)
        self.trainer.step(self.step_batch)
        self._pending = losses
        return losses

    def sync(self) -> None:
        last, self._pending = self._pending, None
        if last is None or self.sync_mode == "waitall":
            self.mx.nd.waitall()
        else:
            for loss in last:
                loss.wait_to_read()

    def loss_value(self, handle) -> float:
        # The mean per-sample loss over the contexts' batches (equal sizes).
        return sum(float(loss.mean().asscalar()) for loss in handle) / len(handle)

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        text = str(exc)
        return any(s in text for s in ("out of memory", "Failed to allocate", "std::bad_alloc", "cudaMalloc"))

    def describe(self) -> dict:
        mx = self.mx
        features = mx.runtime.Features()
        info = {
            "version": mx.__version__,
            "features": {k: features.is_enabled(k) for k in ("MKLDNN", "CUDA", "CUDNN", "NCCL", "DIST_KVSTORE")},
            "device": str(self.ctx),
            "devices": [str(c) for c in self.ctxs],
            "device_name": "cpu" if self.spec.device == "cpu" else f"gpu{self.spec.dist.local_rank}",
            "threads": int(os.environ["OMP_NUM_THREADS"]),
            "engine_worker_threads": int(os.environ["MXNET_CPU_WORKER_NTHREADS"]),
            "trainable_params": self.params,
            "optimizer": training_record(self.trainer),
            "seed": self.spec.seed,  # what build gave mx.random.seed (MXNet has no getter)
            "amp_dtype": self.amp_dtype,
            **self.workload.describe(),
            "sync": self.sync_mode,
        }
        if getattr(self, "real_data", False):
            info["input_pipeline"] = self.data.describe()
        info.update(self.strategy.describe(self))
        return info

    def close(self) -> None:
        if getattr(self, "strategy", None) is not None:
            self.strategy.close(self)


def training_record(trainer) -> dict:
    """The header's framework.optimizer (dlbench.runners._hyperparameters) from the Trainer's
    optimizer object (the one a dist_sync kvstore's servers run too): its scalar attributes,
    its lr_scheduler, and AMP's dynamic loss scaler where amp.init_trainer gave it one."""
    optimizer = trainer._optimizer
    settings = {
        key: value
        for key, value in vars(optimizer).items()
        if key not in _NOT_SETTINGS and (value is None or isinstance(value, (bool, int, float, str)))
    }
    scheduler = optimizer.lr_scheduler
    schedule = "constant"
    if scheduler is not None:
        schedule = {"name": type(scheduler).__name__, **{k: v for k, v in vars(scheduler).items() if k[0] != "_"}}
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    scaling = None
    if scaler is not None:
        scaling = loss_scaling_record(
            "mxnet.contrib.amp LossScaler",
            dynamic=True,
            scale=scaler.loss_scale,
            growth_interval=scaler._scale_seq_len,
            max_scale=scaler._max_loss_scale,
        )
    return optimizer_record(type(optimizer).__name__, settings, schedule, scaling)
