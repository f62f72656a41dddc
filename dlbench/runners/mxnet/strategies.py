"""MXNet's strategies, one object each: the contexts a process drives, its data shard, the
Gluon trainer that reduces gradients, what the header says and how it shuts down
(docs/frameworks/mxnet.md). Importing this module does not import MXNet."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import weakref

from dlbench.runners.mxnet import ps_lite
from dlbench.runners.plugin import StrategyClasses

STRATEGIES = StrategyClasses("mxnet")

# {strategy: reason}: strategies that need CUDA devices.
CUDA_ONLY = {
    "nccl": "the mxnet 1.9.1 wheel has no NCCL (kvstore 'nccl': \"compile with USE_NCCL=1 to use nccl\")",
}


@STRATEGIES.binds("single")
class Single:
    """One process, one device, no kvstore."""

    update_on_kvstore = None  # MXNet's default

    def __init__(self, name: str = "single"):
        self.name = name
        self.kv = None

    def check(self, spec) -> None:
        if spec.dist.world_size > 1:
            raise ValueError(f"mxnet: strategy 'single' with {spec.dist.world_size} ranks")

    def devices(self, spec) -> int:
        """Devices (contexts) this process drives."""
        return 1

    def before_import(self, spec) -> None:
        """Set what MXNet reads once, at import."""

    def after_import(self, mx, spec) -> None:
        pass

    def contexts(self, mx, spec) -> list:
        return [mx.gpu(self.local_device(spec)) if spec.device == "cuda" else mx.cpu()]

    def local_device(self, spec) -> int:
        return spec.dist.local_rank

    def shard(self, spec) -> tuple[int, int]:
        """(parts, index) of this process's share of a real dataset."""
        return spec.dist.world_size, spec.dist.rank

    def kvstore(self, mx, spec):
        return None

    def trainer(self, mx, net, optimizer: str, opt_args: dict, spec, ctxs):
        """(trainer, step batch): gradients are summed over workers and devices, so the
        trainer normalises by the global batch (the update is the mean gradient)."""
        trainer = mx.gluon.Trainer(
            net.collect_params(),
            optimizer,
            opt_args,
            kvstore=self.kvstore(mx, spec),
            update_on_kvstore=self.update_on_kvstore,
        )
        return trainer, spec.batch * spec.dist.world_size * len(ctxs)

    def describe(self, runner) -> dict:
        return {}

    def close(self, runner) -> None:
        pass


@STRATEGIES.binds("device", "nccl")
class MultiDevice(Single):
    """kvstore `device` / `nccl`: one process drives all its node's devices (a list of
    contexts) and the kvstore sums their gradients."""

    def check(self, spec) -> None:
        if spec.dist.world_size > spec.dist.local_world_size:
            raise ValueError(f"mxnet: kvstore {self.name!r} drives one node's devices, not several nodes")
        if self.name in CUDA_ONLY and spec.device != "cuda":
            raise RuntimeError(f"mxnet: kvstore {self.name!r} needs CUDA devices: {CUDA_ONLY[self.name]}")

    def devices(self, spec) -> int:
        return spec.local_devices

    def contexts(self, mx, spec) -> list:
        make = mx.gpu if spec.device == "cuda" else mx.cpu
        return [make(i) for i in range(spec.local_devices)]

    def shard(self, spec) -> tuple[int, int]:
        return 1, 0  # the whole dataset: the node's global batch, split over the contexts

    def kvstore(self, mx, spec):
        self.kv = mx.kv.create(self.name)
        return self.kv

    def describe(self, runner) -> dict:
        if self.kv is None:
            return {}
        return {
            "kvstore": {
                "type": self.kv.type,
                "contexts": [str(c) for c in runner.ctxs],
                "update_on_kvstore": bool(getattr(runner.trainer, "_update_on_kvstore", None)),
                "step_batch": runner.step_batch,
            }
        }


@STRATEGIES.binds("dist_sync")
class DistSync(Single):
    """kvstore `dist_sync`: one process per device, ps-lite scheduler and servers started by
    the ranks themselves; the servers sum the gradients and run the optimizer."""

    update_on_kvstore = True  # MXNet's default for dist kvstores, stated explicitly

    def __init__(self, name: str = "dist_sync"):
        super().__init__(name)
        self.procs: list = []
        self.kv_thread: threading.Thread | None = None

    def check(self, spec) -> None:
        pass

    def before_import(self, spec) -> None:
        operator_node_host = os.environ.get("DMLC_NODE_HOST")
        os.environ.pop("PORT", None)  # ps-lite would take it as this process's own port
        os.environ.update(ps_lite.common_environment(spec.dist, operator_node_host))
        os.environ["DMLC_ROLE"] = "worker"
        self.procs = ps_lite.start_servers(spec.dist, operator_node_host)

    def kvstore(self, mx, spec):
        dist = spec.dist
        ps_lite.wait_for_scheduler(dist, self.procs)
        box, self.kv_thread = ps_lite.start_rendezvous(mx)
        self.kv = ps_lite.await_rendezvous(box, self.kv_thread, dist)
        if self.kv.num_workers != dist.world_size:
            raise RuntimeError(
                f"mxnet dist_sync: kvstore has {self.kv.num_workers} workers, expected {dist.world_size}"
            )
        return self.kv

    def describe(self, runner) -> dict:
        if self.kv is None:
            return {}
        d = runner.spec.dist
        return {
            "kvstore": {
                "type": self.kv.type,
                "rank": self.kv.rank,
                "num_workers": self.kv.num_workers,
                "num_servers": int(os.environ["DMLC_NUM_SERVER"]),
                "scheduler": f"{d.master_addr}:{d.master_port}",
                "update_on_kvstore": True,
            }
        }

    def close(self, runner) -> None:
        if self.kv_thread is not None and self.kv_thread.is_alive():
            # The rendezvous timed out: the thread blocked in ps-lite can neither be joined nor
            # left behind (MXNet's exit would wait for it). The footer is already written.
            ps_lite.stop_servers(self.procs, grace=0)
            os._exit(1)
        if self.kv is None:  # failed before the rendezvous: only the servers to stop
            ps_lite.stop_servers(self.procs, grace=0)
            return
        # Freeing the kvstore runs ps-lite's exit sequence (a barrier over all workers); it
        # must run while the servers live, and a dead peer would block it forever: bounded.
        done = threading.Event()
        threading.Thread(target=self._release_kvstore, args=(runner, done), daemon=True).start()
        finished = done.wait(ps_lite.FINALIZE_TIMEOUT_S)
        ps_lite.stop_servers(self.procs, grace=ps_lite.PS_GRACE_S if finished else 0)
        if not finished:
            print("[dlbench] mxnet: ps-lite shutdown did not complete; ending the process", file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)

    def _release_kvstore(self, runner, done: threading.Event) -> None:
        """Drop every reference to the kvstore; done is set once it has been freed."""
        kv_ref = weakref.ref(self.kv)
        net = getattr(runner, "net", None)
        for param in net.collect_params().values() if net is not None else ():
            param._trainer = None  # Gluon parameters hold their trainer (and its kvstore)
        if runner.trainer is not None:
            runner.trainer._kvstore = None
        runner.trainer = None
        self.kv = None
        gc.collect()
        runner.mx.nd.waitall()
        if kv_ref() is None:
            done.set()


@STRATEGIES.binds("horovod")
class Horovod(Single):
    """One process per device, `hvd.DistributedTrainer` (gradients averaged by allreduce);
    the Gloo rendezvous without horovodrun (dlbench.runners._horovod)."""

    def __init__(self, name: str = "horovod"):
        super().__init__(name)
        self.hvd = self.rendezvous = None

    def check(self, spec) -> None:
        pass

    def after_import(self, mx, spec) -> None:
        from dlbench.runners import _horovod

        self.hvd, self.rendezvous = _horovod.start("horovod.mxnet", spec.dist)

    def local_device(self, spec) -> int:
        return self.hvd.local_rank()

    def shard(self, spec) -> tuple[int, int]:
        return self.hvd.size(), self.hvd.rank()

    def trainer(self, mx, net, optimizer: str, opt_args: dict, spec, ctxs):
        # Every rank starts from rank 0's parameters (after the deferred initialisation); the
        # gradients are averaged over the ranks: the step batch is the local batch.
        self.hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        return self.hvd.DistributedTrainer(net.collect_params(), optimizer, opt_args), spec.batch

    def describe(self, runner) -> dict:
        hvd = self.hvd
        if hvd is None:
            return {}
        version = getattr(__import__("horovod"), "__version__", None)
        return {"horovod": {"version": version, "rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank()}}

    def close(self, runner) -> None:
        if self.rendezvous is not None:
            with contextlib.suppress(Exception):
                self.rendezvous.stop()


def for_run(spec, offered: tuple[str, ...]):
    """The strategy object of `spec`; an unknown strategy is a clear failure."""
    name = spec.coords.strategy
    if name != "single" and name not in offered:
        raise ValueError(f"mxnet: strategy {name!r} not offered (have {offered})")
    return STRATEGIES(name)(name)
