"""The `parameter_server` strategy: ParameterServerStrategy driven by a ClusterCoordinator in
rank 0, the node's worker and parameter-server processes started by the ranks themselves
(dlbench.runners.tensorflow.cluster; docs/frameworks/tensorflow.md). TensorFlow is passed in:
importing this module does not import it."""

from __future__ import annotations

import os
import sys

from dlbench.runners.tensorflow import cluster
from dlbench.runners.tensorflow.pipeline import Feed
from dlbench.runners.tensorflow.strategies import STRATEGIES, Single

# What one step of `parameter_server` is (recorded in the header).
PS_STEP = (
    "synchronous: W scheduled closures (W = workers), each one per-device batch on whichever worker is "
    "free (normally one each), forward + backward, gradients added to sums on the parameter servers; "
    "join; then one scheduled closure applies the summed gradient (divided by the global batch) with the "
    "optimizer and clears the sums; join. samples = W x batch; only the coordinator writes a step log"
)


@STRATEGIES.binds("parameter_server")
class ParameterServer(Single):
    """The coordinator ("chief", rank 0) schedules each step on the workers; it computes nothing."""

    kind = "ps"
    pipeline_note = "; read on each worker inside its step (data_wait does not see it)"

    def __init__(self, name: str = "parameter_server"):
        super().__init__(name)
        self.procs: list = []
        self.cluster: dict = {}
        self.coordinator = None
        self.accumulators: list = []

    def check(self, spec) -> None:
        pass

    def before_import(self, spec) -> None:
        # This node's worker and PS servers, before TensorFlow starts here.
        self.cluster = cluster.ps_cluster(spec.dist, spec.coords.scale_obj.devices_per_node)
        self.procs = cluster.start_ps_servers(spec, self.cluster, node=cluster.node_index(spec.dist))

    def intra_op_threads(self, spec) -> int:
        return 1  # the workers have the threads

    def configure_devices(self, tf, spec) -> list[str]:
        tf.config.set_visible_devices([], "GPU")  # the workers have the GPUs
        return ["/CPU:0"]

    def distribute(self, tf, spec, devices: list[str]):
        cluster.wait_for_servers(self.cluster, self.procs)
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(self.cluster), task_type="chief", task_id=0, rpc_layer="grpc"
        )
        self.distribution = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.distribution)
        return self.distribution

    def replicas(self, spec) -> int:
        return spec.local_devices  # all workers

    def create_state(self, tf, model) -> None:
        # Gradient sums on the parameter servers (one per trainable variable).
        self.accumulators = [
            tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name="grad_sum") for v in model.trainable_variables
        ]

    def synthetic_feed(self, runner, batch) -> Feed:
        # Each worker holds the batch in a dataset of its own (created on the worker once).
        tf = runner.tf
        host = tf.nest.map_structure(lambda t: t.numpy(), batch)
        dataset = self.coordinator.create_per_worker_dataset(lambda: tf.data.Dataset.from_tensors(host).repeat())
        return Feed(inputs=iter(dataset))

    def real_feed(self, runner, data) -> Feed:
        """`create_per_worker_dataset`: every worker runs a pipeline of its own (all shards, its
        own random order, as TensorFlow advises for PS training), read in its scheduled closure."""
        spec = runner.spec
        # One pipeline per worker server (the task's data workers split over its devices).
        threads = max(1, spec.data_workers // max(1, spec.coords.scale_obj.devices_per_node))
        dataset = self.coordinator.create_per_worker_dataset(lambda: data.dataset(spec.batch, threads, None))
        return Feed(inputs=iter(dataset), threads=threads, sharding="every worker all shards, its own order")

    def train_step(self, runner):
        tf = runner.tf
        # XLA (if asked) compiles the per-replica forward/backward only.
        fb = tf.function(runner.forward_backward, jit_compile=True) if runner.spec.compile else runner.forward_backward
        worker_step, apply_step = self._closures(tf, fb, runner.optimizer, runner.model.trainable_variables)
        coordinator, workers, inputs = self.coordinator, len(self.cluster["worker"]), runner.feed.inputs

        def ps_step():
            losses = [coordinator.schedule(worker_step, args=(inputs,)) for _ in range(workers)]
            coordinator.join()
            coordinator.schedule(apply_step)
            coordinator.join()
            return losses

        if not runner.real_data:
            return ps_step

        def ps_step_real_data():
            try:
                return ps_step()
            except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
                raise runner.data_error(error) from None

        return ps_step_real_data

    def _closures(self, tf, fb, optimizer, variables):
        """The two tf.functions a step schedules: a worker's forward/backward adding its
        gradients to the sums, and the update from the sums."""
        accumulators, distribution = self.accumulators, self.distribution

        @tf.function
        def worker_step(iterator):
            def replica(batch):
                loss, grads = fb(batch)
                for acc, grad in zip(accumulators, grads, strict=True):
                    acc.assign_add(grad)  # pushed to the parameter server holding the variable
                return loss

            return distribution.run(replica, args=(next(iterator),))

        @tf.function
        def apply_step():
            def replica():
                # The summed gradient of every worker's batch (each already divided by the
                # global batch), applied once; then the sums are cleared.
                optimizer.apply_gradients(zip([a.read_value() for a in accumulators], variables, strict=True))
                for acc in accumulators:
                    acc.assign(tf.zeros_like(acc))

            distribution.run(replica)

        return worker_step, apply_step

    def sync_devices(self, tf, spec) -> list[str]:
        return []  # the coordinator runs nothing; step() joins the workers

    def describe(self, runner) -> dict:
        return {
            "name": "ParameterServerStrategy",
            "coordinator": "ClusterCoordinator",
            "synchronous": True,
            "step": PS_STEP,
            "workers": len(self.cluster["worker"]),
            "parameter_servers": len(self.cluster["ps"]),
            "global_batch": runner.global_batch,
            "tf_config": {"cluster": self.cluster, "task": {"type": "chief", "index": 0}},
        }

    def close(self) -> None:
        if not self.procs:
            return
        cluster.stop_processes(self.procs)
        # At interpreter exit the coordinator's eager context would try to remove its
        # functions from the stopped servers (gRPC errors, retries): the footer is
        # written, so the process ends here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
