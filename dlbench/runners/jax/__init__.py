"""JAX runner: Flax linen CNNs (NHWC, BatchNorm), optax SGD with momentum, and Llamas with
optax AdamW (llm.py, docs/frameworks/llm.md), one `jax.jit` step with the state donated, and
data parallelism over one node's devices through a sharded batch (for the Llamas also FSDP and
tensor parallelism over a named mesh, strategies.py). docs/frameworks/jax.md
explains the fast path, threads and devices. Importing this package does not import JAX:
`Runner.import_framework()` does, after setting what XLA reads at start-up."""

from __future__ import annotations

import os

from dlbench.runners import training_option_unavailable
from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.base import run_training_options
from dlbench.runners.jax import strategies
from dlbench.runners.jax.workloads import WORKLOADS
from dlbench.runners.plugin import Capabilities, ProcessLayout, Strategy

CAPABILITIES = Capabilities(
    label="JAX",
    colour="#9467bd",
    models=WORKLOADS.models,  # what its workloads train (workloads.py)
    unavailable_models={
        "inception_v3": "the JAX runner has no Flax InceptionV3 yet",
        "bert_base": "the JAX runner has no Flax BERT yet",
    },
    precisions=("fp32", "amp"),
    profiler="jax.profiler",  # a profiled run's trace (dlbench.runners.profilers)
    # Real data: the LLMs' packed tokens only (llm.TokenBatches); no image or text pipeline yet.
    data=("synthetic", "real"),
    real_data_unavailable={
        "image": "the JAX runner has no real-data input pipeline for images yet (it reads the LLMs' tokens only)",
        "text": "the JAX runner has no real-data input pipeline for BERT's examples yet",
    },
    strategies=(
        Strategy(
            "sharded",
            "JAX jit over a device mesh (one process per node, jax.distributed across nodes): the batch "
            "split across the devices, parameters replicated, gradients all-reduced by XLA",
            layout=ProcessLayout.PER_NODE,
        ),
        Strategy(
            "mesh_fsdp",
            "JAX jit over a 1-D mesh (fsdp) of every device: the batch split, each parameter and AdamW moment "
            "sharded on its largest divisible dimension, XLA's GSPMD all-gathering weights and reduce-scattering "
            "gradients in the step",
            layout=ProcessLayout.PER_NODE,
            shards_state=True,
            model_kinds=("llm",),
            kind_reason="its sharding rules are written for the Llama's parameters",
        ),
        Strategy(
            "mesh_fsdp_tp",
            "JAX jit over a 2-D mesh (fsdp, tensor): tensor parallelism over a node's devices (each Llama block's "
            "heads and FFN split, the vocabulary too), FSDP across nodes, partitioned by XLA's GSPMD",
            layout=ProcessLayout.PER_NODE,
            tensor_parallel=True,
            shards_state=True,
            model_kinds=("llm",),
            kind_reason="its sharding rules are written for the Llama's parameters",
        ),
        Strategy(
            "pp",
            "pipeline parallelism: not offered in JAX (its cells say why)",
            unavailable=strategies.PIPELINE_UNAVAILABLE,
            pipeline="devices",
            model_kinds=("llm",),
            kind_reason="its stages would be a Llama's blocks",
        ),
    ),
    device_envs={"cuda": "jax-cuda"},  # envs/jax-cuda.txt (docs/gpu.md)
)


def cpu_share(threads: int, local_rank: int = 0) -> set[int] | None:
    """The CPUs this process keeps (XLA:CPU sizes its thread pool by the CPUs it may run on):
    `threads` of the allowed ones, the local rank's block; None when that is all of them."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads <= 0 or threads >= len(allowed):
        return None
    start = (local_rank * threads) % len(allowed)
    return set((allowed * 2)[start : start + threads])


class Runner(BaseRunner):
    def import_framework(self) -> None:
        if getattr(self, "jax", None) is not None:
            return
        spec = self.spec
        cpus = cpu_share(spec.threads, spec.dist.local_rank) if spec.device == "cpu" else None
        if cpus:
            os.sched_setaffinity(0, cpus)
        if spec.device == "cpu" and spec.local_devices > 1:
            # The node's devices as CPU devices of one process (read once, when XLA starts).
            flag = f"--xla_force_host_platform_device_count={spec.local_devices}"
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu" if spec.device == "cpu" else "cuda")
        import jax
        import jax.numpy as jnp

        self.jax = jax
        if spec.dist.world_size > 1:
            from dlbench.runners.jax.train import start_distributed

            start_distributed(spec.dist, spec.device == "cpu")
        local = jax.local_devices()
        if len(local) < spec.local_devices:
            raise RuntimeError(f"jax: {spec.local_devices} devices requested, {len(local)} visible")
        self.devices = local[: spec.local_devices] if spec.dist.world_size == 1 else jax.devices()
        jnp.zeros(8).block_until_ready()  # start XLA's threads before the worker's memory cap

    def build(self) -> None:
        self.import_framework()
        import jax.numpy as jnp

        spec = self.spec
        # The grid plans a training option the workload declares not as unavailable; refused here too.
        reason = training_option_unavailable("jax", spec.coords.model, *run_training_options(spec.coords))
        if reason:
            raise ValueError(reason)
        self.dtype = jnp.bfloat16 if spec.coords.precision == "amp" else jnp.float32
        self._last = None
        self._events = None
        # On a GPU the queue is drained at the window's ends only (clock.py); the GPU check
        # sets it False to measure what per-step sync costs.
        self.window_sync = spec.device == "cuda"
        # The run's model kind picks its workload (workloads.py): model, optimizer, data, step.
        self.workload = WORKLOADS(spec.coords.model)(spec)
        self.state, self.inputs, self.step_fn, self.compile_record = self.workload.build(
            self.jax, self.devices, self.dtype
        )
        self.params = self.workload.params

    def next_batch(self):
        batches = self.workload.batches
        return None if batches is None else next(batches)

    def step(self, batch=None):
        inputs = self.inputs if batch is None else (batch,)
        self.state, loss = self.step_fn(self.state, *inputs)
        self._last = loss
        return loss

    def sync(self) -> None:
        # One XLA executable per step: its outputs (the loss, the new state) are ready together.
        if self._last is not None:
            self._last.block_until_ready()
        if self._events is not None:
            self._events.resolve()

    def step_events(self, steps: int):
        if not getattr(self, "window_sync", False):
            return None
        from dlbench.runners.jax.clock import ReadyClock

        self._events = ReadyClock(lambda: self._last)
        return self._events

    def timing(self) -> dict:
        if getattr(self, "window_sync", False):
            from dlbench.runners.jax.clock import CLOCK

            return {"clock": CLOCK, "sync": "window"}
        return super().timing()

    def device_memory(self) -> dict | None:
        stats = self.devices[0].memory_stats() if getattr(self, "devices", None) else None
        if not stats or "peak_bytes_in_use" not in stats:  # XLA:CPU reports none
            return None
        return {
            "peak_bytes": int(stats["peak_bytes_in_use"]),
            "reserved_bytes": None,
            "limit_bytes": int(stats["bytes_limit"]) if "bytes_limit" in stats else None,
            "method": "jax Device.memory_stats()['peak_bytes_in_use'] of the first local device",
        }

    def loss_value(self, handle) -> float:
        return float(handle)

    def is_oom(self, exc: BaseException) -> bool:
        text = str(exc)
        return isinstance(exc, MemoryError) or any(
            s in text for s in ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "bad_alloc")
        )

    def describe(self) -> dict:
        import flax
        import jaxlib
        import optax

        jax = self.jax
        return {
            "version": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "flax": flax.__version__,
            "optax": optax.__version__,
            "backend": jax.default_backend(),
            "device_name": self.devices[0].device_kind,
            "devices": [str(d) for d in self.devices],
            "processes": self.jax.process_count(),
            "threads": len(os.sched_getaffinity(0)),
            "trainable_params": self.params,
            "optimizer": self.workload.training_record(self.state),
            "seed": self.spec.seed,  # what the workload's jax.random.key gets (JAX has no global seed)
            "memory_format": self.workload.memory_format,
            "compute_dtype": self.jax.numpy.dtype(self.dtype).name,
            "implementation": "Flax linen model, jax.jit train step with the state donated, "
            + self.workload.optimizer_text,
            "step_compile": getattr(self, "compile_record", None),
            **self.workload.describe(),
        }
