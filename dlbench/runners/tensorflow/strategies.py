"""TensorFlow's strategies, one object each: the devices a process sees, the tf.distribute
strategy, how many replicas share a step, what the step reads, the train step itself, what the
header says and how the process ends (docs/frameworks/tensorflow.md). TensorFlow is passed
in: importing this module does not import it."""

from __future__ import annotations

import contextlib
import json
import os

from dlbench.runners.plugin import StrategyClasses
from dlbench.runners.tensorflow.pipeline import Feed

STRATEGIES = StrategyClasses("tensorflow")

# {strategy: reason}: strategies that need CUDA devices.
CUDA_ONLY = {
    "replicated_nccl": "NcclAllReduce has no CPU kernels (TensorFlow: 'NcclAllReduce ... no registered kernels')",
}


def _visible_gpus(tf) -> list:
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise RuntimeError("device cuda requested but TensorFlow sees no GPU")
    return gpus


@STRATEGIES.binds("single")
class Single:
    """One process, one device, TensorFlow's default (no-op) strategy."""

    kind = "single"
    # Batch-norm moving statistics per replica (ON_READ, averaged when read), as Keras does
    # under the mirrored strategies.
    mirrored = False
    pipeline_note = ""  # appended to the header's input_pipeline

    def __init__(self, name: str = "single"):
        self.name = name
        self.distribution = None  # the tf.distribute strategy, once made

    def check(self, spec) -> None:
        if spec.dist.world_size > 1:
            raise ValueError(f"tensorflow runner: strategy 'single' with {spec.dist.world_size} ranks")

    def before_import(self, spec) -> None:
        """What has to happen before TensorFlow is imported here."""

    def intra_op_threads(self, spec) -> int:
        return spec.threads

    def local_rank(self, spec) -> int:
        return spec.dist.local_rank

    def configure_devices(self, tf, spec) -> list[str]:
        """Make this process see its devices (before the TF runtime starts); their names."""
        if spec.device == "cuda":
            gpus = _visible_gpus(tf)
            # One process per GPU: this process sees only its own.
            tf.config.set_visible_devices(gpus[self.local_rank(spec) % len(gpus)], "GPU")
            return ["/GPU:0"]
        tf.config.set_visible_devices([], "GPU")
        return ["/CPU:0"]

    def distribute(self, tf, spec, devices: list[str]):
        self.distribution = tf.distribute.get_strategy()
        return self.distribution

    def replicas(self, spec) -> int:
        """Replicas whose samples one step trains (losses are averaged over all of them)."""
        return 1

    def create_state(self, tf, model) -> None:
        """Variables of the strategy's own, created in its scope after the model's."""

    def broadcast_initial_state(self, tf, model, optimizer) -> None:
        pass

    def shard(self) -> tuple[int, int]:
        """(parts, index) of this process's share of the real data."""
        return 1, 0

    def synthetic_feed(self, runner, batch) -> Feed:
        return Feed(inputs=batch)

    def real_feed(self, runner, data) -> Feed:
        """One pipeline, read by next_batch() (on a GPU prefetched to the device)."""
        tf, spec = runner.tf, runner.spec
        ranks, rank = self.shard()
        threads = spec.data_workers
        dataset = data.dataset(spec.batch, threads, spec.seed, ranks, rank)
        if runner.device.startswith("/GPU"):
            dataset = dataset.apply(tf.data.experimental.prefetch_to_device(runner.device))
        sharding = f"{ranks} ranks, each its own" if ranks > 1 else "one pipeline"
        return Feed(
            batches=iter(dataset),
            element_spec=dataset.element_spec,
            threads=threads,
            sharding=sharding,
            pipelines=ranks,
        )

    def train_step(self, runner):
        optimizer, variables = runner.optimizer, runner.model.trainable_variables

        def train_step(inputs):
            loss, grads = runner.forward_backward(inputs)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        return runner.step_function(train_step, jit_compile=bool(runner.spec.compile))

    def sync_devices(self, tf, spec) -> list[str]:
        """The devices whose queued work sync() waits for: this process's own."""
        return [d.name for d in tf.config.list_logical_devices()]

    def describe(self, runner) -> dict | None:
        """The header's `strategy` (None: no such field)."""
        return None

    def close(self) -> None:
        pass


class Mirrored(Single):
    """The mirrored strategies: the optimizer all-reduces (sums) the gradients across replicas."""

    mirrored = True

    def input_pipelines(self, spec) -> int:
        return 1

    def real_feed(self, runner, data) -> Feed:
        """`distribute_datasets_from_function`: one pipeline per worker of per-replica batches."""
        spec, threads = runner.spec, runner.spec.data_workers

        def dataset_fn(context):
            return data.dataset(
                context.get_per_replica_batch_size(runner.global_batch),
                threads,
                spec.seed,
                context.num_input_pipelines,
                context.input_pipeline_id,
            )

        batches = iter(self.distribution.distribute_datasets_from_function(dataset_fn))
        pipelines = self.input_pipelines(spec)
        sharding = f"{pipelines} workers, each its own" if pipelines > 1 else "one pipeline, a batch per device"
        return Feed(
            batches=batches, element_spec=batches.element_spec, threads=threads, sharding=sharding, pipelines=pipelines
        )

    def train_step(self, runner):
        tf, optimizer, variables = runner.tf, runner.optimizer, runner.model.trainable_variables
        # XLA (if asked) compiles the per-replica forward/backward; the cross-replica
        # reduction inside the optimizer stays outside it.
        fb = tf.function(runner.forward_backward, jit_compile=True) if runner.spec.compile else runner.forward_backward
        distribution = self.distribution

        def replica_step(inputs):
            loss, grads = fb(inputs)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        def train_step(inputs):
            per_replica = distribution.run(replica_step, args=(inputs,))
            # The global mean loss (each replica's share is already divided by the global batch).
            return distribution.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return runner.step_function(train_step)


@STRATEGIES.binds("multi_worker_mirrored")
class MultiWorkerMirrored(Mirrored):
    """MultiWorkerMirroredStrategy: one process (worker, replica) per device, collectives."""

    kind = "mwms"

    def check(self, spec) -> None:
        pass

    def before_import(self, spec) -> None:
        from dlbench.runners.tensorflow.cluster import tf_config

        # Read when MultiWorkerMirroredStrategy is created.
        os.environ["TF_CONFIG"] = json.dumps(tf_config(spec.dist))

    def distribute(self, tf, spec, devices: list[str]):
        implementation = (
            tf.distribute.experimental.CommunicationImplementation.NCCL
            if spec.device == "cuda"
            else tf.distribute.experimental.CommunicationImplementation.RING
        )
        self.communication = implementation.name
        self.distribution = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        )
        return self.distribution

    def replicas(self, spec) -> int:
        return self.distribution.num_replicas_in_sync

    def input_pipelines(self, spec) -> int:
        return spec.dist.world_size

    def sync_devices(self, tf, spec) -> list[str]:
        # The logical devices include the other workers': only this task's.
        task = f"/task:{spec.dist.rank}/"
        return [d.name for d in tf.config.list_logical_devices() if "/job:" not in d.name or task in d.name]

    def describe(self, runner) -> dict:
        return {
            "name": "MultiWorkerMirroredStrategy",
            "communication": self.communication,
            "num_replicas_in_sync": self.distribution.num_replicas_in_sync,
            "tf_config": json.loads(os.environ["TF_CONFIG"]),
        }


# tf_cnn_benchmarks' variable_update=replicated with its all_reduce_spec: nccl, a
# hierarchical copy (its DGX-1 "copy"), or reduction to the CPU (its "pscpu").
_CROSS_DEVICE_OPS = {
    "replicated_nccl": lambda tf: tf.distribute.NcclAllReduce(),
    "replicated_copy": lambda tf: tf.distribute.HierarchicalCopyAllReduce(),
    "replicated_pscpu": lambda tf: tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0"),
}


@STRATEGIES.binds("replicated_nccl", "replicated_copy", "replicated_pscpu")
class Replicated(Mirrored):
    """MirroredStrategy: one process drives all devices of its node (on the CPU, logical
    CPU devices standing in for them)."""

    kind = "replicated"

    def check(self, spec) -> None:
        if spec.dist.world_size > spec.dist.local_world_size:
            raise ValueError(f"{self.name}: MirroredStrategy drives one node's devices, not several nodes")
        if self.name in CUDA_ONLY and spec.device != "cuda":
            raise RuntimeError(f"{self.name} needs CUDA devices: {CUDA_ONLY[self.name]}")

    def configure_devices(self, tf, spec) -> list[str]:
        n = spec.local_devices
        if spec.device == "cuda":
            gpus = _visible_gpus(tf)
            if len(gpus) < n:
                raise RuntimeError(f"{self.name}: {n} devices, TensorFlow sees {len(gpus)} GPUs")
            tf.config.set_visible_devices(gpus[:n], "GPU")
            return [f"/GPU:{i}" for i in range(n)]
        tf.config.set_visible_devices([], "GPU")
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(n)])
        return [f"/CPU:{i}" for i in range(n)]

    def distribute(self, tf, spec, devices: list[str]):
        self.cross_device_ops = _CROSS_DEVICE_OPS[self.name](tf)
        self.distribution = tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=self.cross_device_ops)
        return self.distribution

    def replicas(self, spec) -> int:
        return spec.local_devices

    def synthetic_feed(self, runner, batch) -> Feed:
        # The same batch on every device, copied there once.
        tf = runner.tf
        inputs = self.distribution.experimental_distribute_values_from_function(
            lambda ctx: tf.nest.map_structure(tf.identity, batch)
        )
        return Feed(inputs=inputs)

    def describe(self, runner) -> dict:
        spec = runner.spec
        return {
            "name": "MirroredStrategy",
            "variant": self.name,
            "cross_device_ops": type(self.cross_device_ops).__name__,
            "reduce_to_device": "/cpu:0" if self.name == "replicated_pscpu" else None,
            "devices": list(self.distribution.extended.worker_devices),
            "num_replicas_in_sync": self.distribution.num_replicas_in_sync,
            # On the CPU the devices are logical devices of one physical CPU, sharing the
            # process's intra-op pool (TensorFlow has no per-device thread pool).
            "logical_cpu_devices": spec.device != "cuda",
            "global_batch": runner.global_batch,
        }


@STRATEGIES.binds("horovod")
class Horovod(Single):
    """One process per device; gradients averaged by Horovod's allreduce (Gloo on the CPU,
    NCCL on a GPU), the Gloo rendezvous without horovodrun (dlbench.runners._horovod)."""

    kind = "horovod"

    def __init__(self, name: str = "horovod"):
        super().__init__(name)
        self.hvd = self.rendezvous = None

    def check(self, spec) -> None:
        pass

    def before_import(self, spec) -> None:
        from dlbench.runners import _horovod

        self.hvd, self.rendezvous = _horovod.start("horovod.tensorflow", spec.dist)

    def local_rank(self, spec) -> int:
        return self.hvd.local_rank()

    def shard(self) -> tuple[int, int]:
        return self.hvd.size(), self.hvd.rank()

    def broadcast_initial_state(self, tf, model, optimizer) -> None:
        # Every rank starts from rank 0's initial state.
        for variables in (model.variables, optimizer.variables):
            self.hvd.broadcast_variables([v if isinstance(v, tf.Variable) else v.value for v in variables], root_rank=0)

    def train_step(self, runner):
        tf, hvd = runner.tf, self.hvd
        optimizer, variables = runner.optimizer, runner.model.trainable_variables

        def horovod_step(inputs):
            with tf.GradientTape() as tape:
                loss, scaled = runner.mean_loss(runner.prepare(inputs))  # the local batch's mean
            # Allreduce (average over ranks, Gloo on CPU / NCCL on GPU) of the gradients.
            grads = hvd.DistributedGradientTape(tape).gradient(scaled, variables)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        return runner.step_function(horovod_step, jit_compile=bool(runner.spec.compile))

    def describe(self, runner) -> dict:
        hvd = self.hvd
        return {
            "name": "horovod",
            "version": getattr(__import__("horovod"), "__version__", None),
            "rank": hvd.rank(),
            "size": hvd.size(),
            "local_rank": hvd.local_rank(),
            "gloo_enabled": bool(hvd.gloo_enabled()),
            "nccl_built": bool(hvd.nccl_built()),
        }

    def close(self) -> None:
        if self.rendezvous is not None:
            with contextlib.suppress(Exception):
                self.rendezvous.stop()
