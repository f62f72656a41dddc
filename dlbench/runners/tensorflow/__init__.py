"""TensorFlow runner: TF-native CNNs and a Keras BERT-base, one `tf.function` per train step,
and five strategies (single, multi_worker_mirrored, replicated_*, parameter_server, horovod),
one object each. docs/frameworks/tensorflow.md explains the fast path, the models, the input
pipelines and the strategies. Importing this package does not import TensorFlow (the
analysis environment imports it to validate config); `Runner.import_framework()` does."""

from __future__ import annotations

import math
import os

from dlbench.recipe import BERT_BASE
from dlbench.runners import _horovod
from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.plugin import Capabilities, Option, ProcessLayout, Strategy
from dlbench.runners.tensorflow import strategies
from dlbench.runners.tensorflow.bert import bert_model as _bert_model
from dlbench.runners.tensorflow.cluster import (
    RENDEZVOUS_TIMEOUT_S,
    node_servers,
    ps_cluster,
    serve,
    start_ps_servers,
    stop_processes,
    tf_config,
    wait_for_servers,
)
from dlbench.runners.tensorflow.models import WORKLOADS
from dlbench.runners.tensorflow.parameter_server import PS_STEP  # importing it binds its strategy class
from dlbench.runners.tensorflow.pipeline import bert_dataset, find_corrupt_record, image_dataset, image_pipeline_text

__all__ = [
    "BERT_BASE",
    "PS_STEP",
    "RENDEZVOUS_TIMEOUT_S",
    "WORKLOADS",
    "Runner",
    "_bert_model",
    "bert_dataset",
    "find_corrupt_record",
    "image_dataset",
    "image_pipeline_text",
    "node_servers",
    "ps_cluster",
    "serve",
    "start_ps_servers",
    "stop_processes",
    "strategy_kind",
    "tf_config",
    "wait_for_servers",
]


def _replicated(name: str, how: str, **kwargs) -> Strategy:
    # MirroredStrategy: one process drives all devices of its node (and only one node).
    text = f"TensorFlow MirroredStrategy ({how}): one process per node drives its devices, gradients all-reduced"
    return Strategy(name, text, layout=ProcessLayout.PER_NODE, single_node=True, **kwargs)


CAPABILITIES = Capabilities(
    label="TensorFlow",
    colour="#ff8f00",
    models=WORKLOADS.models,  # what its workloads train (models.py)
    precisions=("fp32", "amp"),
    data=("synthetic", "real"),
    image_format="tfrecord",
    converts=("tfrecord",),
    strategies=(
        Strategy(
            "multi_worker_mirrored",
            "TensorFlow MultiWorkerMirroredStrategy: synchronous data parallelism, gradients all-reduced every step",
        ),
        _replicated("replicated_nccl", "NCCL all-reduce", cuda_only=strategies.CUDA_ONLY["replicated_nccl"]),
        _replicated("replicated_copy", "hierarchical copy"),
        _replicated("replicated_pscpu", "gradients reduced on the CPU"),
        # ParameterServerStrategy: the coordinator (rank 0) writes the only step log.
        Strategy(
            "parameter_server",
            "TensorFlow ParameterServerStrategy: a coordinator drives every device through per-node servers",
            layout=ProcessLayout.COORDINATOR,
        ),
        _horovod.strategy(),
    ),
    device_envs={"cuda": "tensorflow-cuda"},  # envs/tensorflow-cuda.txt (docs/gpu.md)
    options=(Option("inter_op_threads", 0, "TensorFlow's inter-op threads; 0: the process's cores, at least 2"),),
    profiler="tf.profiler",  # a profiled run's trace (dlbench.runners.profilers)
)


def _strategy_class(name: str) -> type:
    return strategies.STRATEGIES(name)


def strategy_kind(name: str) -> str:
    """The family of strategy `name`: single, mwms, replicated, ps or horovod."""
    return _strategy_class(name).kind


def _inter_op_threads(spec) -> int:
    """Inter-op threads: the cores this process is given (TensorFlow's default is one per
    core of the machine), at least 2 (measurements in docs/frameworks/tensorflow.md); the
    `inter_op_threads` option overrides it; the header records inter_op_threads."""
    return spec.options["inter_op_threads"] or max(2, spec.threads)


class Runner(BaseRunner):
    def import_framework(self) -> None:
        """Import TensorFlow and fix its process-wide settings (before the worker's memory cap).

        Only configuration here, no op: MultiWorkerMirroredStrategy must be created (in
        build) before the TF runtime starts, and logical CPU devices (MirroredStrategy's
        stand-ins for GPUs) can only be configured before it starts.
        """
        if getattr(self, "tf", None) is not None:
            return
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        spec = self.spec
        strategy = _strategy_class(spec.coords.strategy)(spec.coords.strategy)
        strategy.check(spec)
        self.strategy = strategy
        strategy.before_import(spec)

        import keras
        import tensorflow as tf

        self.tf = tf
        self.keras = keras
        # Threads first: they are fixed once the TF runtime initialises.
        tf.config.threading.set_intra_op_parallelism_threads(strategy.intra_op_threads(spec))
        tf.config.threading.set_inter_op_parallelism_threads(_inter_op_threads(spec))
        self.devices = strategy.configure_devices(tf, spec)
        self.device = self.devices[0]

    def build(self) -> None:
        self.import_framework()
        tf, keras, spec, strategy = self.tf, self.keras, self.spec, self.strategy
        amp = spec.coords.precision == "amp"
        self.policy = ("mixed_float16" if spec.device == "cuda" else "mixed_bfloat16") if amp else "float32"
        keras.mixed_precision.set_global_policy(self.policy)
        keras.utils.set_random_seed(spec.seed)
        distribution = strategy.distribute(tf, spec, self.devices)
        # Samples one step trains over all replicas; losses are averaged over it (gradients
        # are summed across replicas). Horovod averages gradients itself: its loss is local.
        self.global_batch = spec.batch * strategy.replicas(spec)
        # The run's model kind picks its workload (models.py): model, optimizer, data, loss.
        self.workload = WORKLOADS(spec.coords.model)(spec)
        with distribution.scope():
            self.model, self.optimizer, self.loss_scaling = self.workload.build(
                keras, tf, self.policy, strategy.mirrored
            )
            self.optimizer.build(self.model.trainable_variables)
            strategy.create_state(tf, self.model)
        self.params = int(sum(math.prod(v.shape) for v in self.model.trainable_variables))
        strategy.broadcast_initial_state(tf, self.model, self.optimizer)

        self.real_data = spec.coords.data == "real"
        self.prepare = self.workload.prepare(tf, self.real_data)
        self.feed = self._real_feed() if self.real_data else self._synthetic_feed()
        self._step_fn = strategy.train_step(self)
        from tensorflow.python.eager import context

        self._async_wait = context.async_wait
        self._local_devices = strategy.sync_devices(tf, spec)

    # -- data -----------------------------------------------------------------------------

    def _synthetic_feed(self):
        with self.tf.device(self.device):
            batch = self.workload.synthetic_batch(self.tf)
        return self.strategy.synthetic_feed(self, batch)

    def _real_feed(self):
        """The strategy's real-data pipelines (dlbench.runners.tensorflow.pipeline)."""
        self.data = self.workload.real_data(self.tf)
        feed = self.strategy.real_feed(self, self.data)
        self.input_pipeline = self.data.describe(feed) + self.strategy.pipeline_note
        return feed

    def next_batch(self):
        batches = self.feed.batches
        if batches is None:
            return None
        try:
            return next(batches)
        except (self.tf.errors.InvalidArgumentError, self.tf.errors.DataLossError) as error:
            raise self.data_error(error) from None

    def data_error(self, error):
        """A decode/read error of the pipeline as one DataError naming the record (or the data)."""
        return self.data.error(error)

    # -- the step -------------------------------------------------------------------------

    def mean_loss(self, inputs):
        """(loss, what to differentiate): the mean over the global batch (gradients are summed
        across replicas), scaled for float16 training."""
        tf = self.tf
        per_example = self.workload.per_example_loss(tf, self.model, inputs, training=True)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.global_batch)
        return loss, (self.optimizer.scale_loss(loss) if self.loss_scaling else loss)

    def forward_backward(self, inputs):
        inputs = self.prepare(inputs)
        with self.tf.GradientTape() as tape:
            loss, scaled = self.mean_loss(inputs)
        return loss, tape.gradient(scaled, self.model.trainable_variables)

    def step_function(self, body, **kwargs):
        """The step as a tf.function: of the batch next_batch() gives (real data; a fixed
        signature, traced once), or of nothing with the synthetic batch captured."""
        tf, feed = self.tf, self.feed
        if feed.batches is not None:
            return tf.function(body, input_signature=[feed.element_spec], **kwargs)
        return tf.function(lambda: body(feed.inputs), **kwargs)

    def step(self, batch=None):
        # batch None: synthetic data (captured in the step) or parameter_server (its workers
        # read their own datasets).
        return self._step_fn() if batch is None else self._step_fn(batch)

    def sync(self) -> None:
        # TF's benchmarking barrier (tf.test.experimental.sync_devices) on this process's own
        # devices only; docs/frameworks/tensorflow.md says why the loss is not the sync point.
        tf = self.tf
        for name in self._local_devices:
            with tf.device(name):
                tf.raw_ops.SyncDevice()
        self._async_wait()  # pending eager ops, if asynchronous execution was enabled

    def loss_value(self, handle) -> float:
        if isinstance(handle, list):  # parameter server: each worker's share of the global mean
            return float(sum(float(r.fetch()) for r in handle))
        return float(handle.numpy())

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        tf = getattr(self, "tf", None)
        if tf is not None and isinstance(exc, tf.errors.ResourceExhaustedError):
            return True
        text = str(exc)
        return "ResourceExhaustedError" in type(exc).__name__ or "RESOURCE_EXHAUSTED" in text or "OOM when" in text

    def describe(self) -> dict:
        from tensorflow.python.eager import context

        from dlbench.runners.tensorflow.optim import training_record

        tf = self.tf
        build = dict(tf.sysconfig.get_build_info())
        info = {
            "version": tf.__version__,
            "keras_version": self.keras.__version__,
            "device_name": "cpu",
            "threads": self.spec.threads,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "trainable_params": self.params,
            "optimizer": training_record(self.optimizer),
            "seed": context.global_seed(),  # the global seed keras.utils.set_random_seed set
            "xla": bool(self.spec.compile),
            "precision_policy": self.policy,
            "memory_format": "channels_last",
            # Which model and training-step code ran (the fastest known path).
            "implementation": self.workload.implementation,
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
            "cuda_build": bool(build.get("is_cuda_build")),
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
        }
        if self.device.startswith("/GPU"):
            details = tf.config.experimental.get_device_details(tf.config.get_visible_devices("GPU")[0])
            info["device_name"] = details.get("device_name", "gpu")
            info["compute_capability"] = details.get("compute_capability")
        described = self.strategy.describe(self)
        if described is not None:
            info["strategy"] = described
        info.update(self.workload.describe())
        if getattr(self, "real_data", False):
            info["input_pipeline"] = self.input_pipeline
        return info

    def close(self) -> None:
        strategy = getattr(self, "strategy", None)
        if strategy is not None:
            strategy.close()
