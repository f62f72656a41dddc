"""PyTorch's strategies, one object each: how a rank joins the run, wraps its model and its
optimizer, and leaves (docs/frameworks/pytorch.md). Importing this module does not import torch."""

from __future__ import annotations

import contextlib
import dataclasses
import os

from dlbench.runners.base import run_training_options
from dlbench.runners.plugin import StrategyClasses

STRATEGIES = StrategyClasses("pytorch")


@STRATEGIES.binds("single")
class Single:
    """One process, one device: nothing to set up."""

    layout = None  # a sharded strategy's parallel layout, for the header (set in wrap_model)
    # FSDP2's MixedPrecisionPolicy where the sharding itself computes amp (set in wrap_model);
    # None: the runner's step runs under autocast (amp) or in float32.
    mixed_precision = None
    # A pipeline's schedule runs a step's forward and backward passes (`train_step`,
    # pipeline_parallel.py); False: the runner's own micro-batch loop does.
    schedules_micro_batches = False

    def start(self, spec, device) -> None:
        pass

    def wrap_model(self, model, spec, device, amp_dtype=None):
        """The model as the strategy trains it; `amp_dtype`: amp's compute dtype (None: fp32)."""
        return model

    def wrap_optimizer(self, optimizer, model):
        return optimizer

    def gradient_sync(self, model, last: bool):
        """The context of one micro-batch's backward pass under gradient accumulation: the
        ranks synchronise the gradients of the `last` only, those of the others accumulate
        locally (`model`: what wrap_model returned, uncompiled)."""
        return contextlib.nullcontext()

    def data_shard(self, spec) -> tuple[int, int, int]:
        """(index, count, devices): this rank's shard of the global batch, how many shards, and
        the devices that read each shard (a tensor group; 1 under data parallelism)."""
        return spec.dist.rank, spec.dist.world_size, 1

    def close(self) -> None:
        pass


@STRATEGIES.binds("ddp")
class DDP(Single):
    """DistributedDataParallel, one process per device: gloo on the CPU, NCCL on CUDA."""

    def start(self, spec, device) -> None:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", spec.dist.master_addr)
        os.environ.setdefault("MASTER_PORT", str(spec.dist.master_port))
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            rank=spec.dist.rank,
            world_size=spec.dist.world_size,
        )

    def wrap_model(self, model, spec, device, amp_dtype=None):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[spec.dist.local_rank] if device.type == "cuda" else None)

    def gradient_sync(self, model, last: bool):
        return contextlib.nullcontext() if last else model.no_sync()

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


@STRATEGIES.binds("fsdp")
class FSDP(DDP):
    """FSDP2 (`fully_shard`), one process per device: parameters, gradients and optimizer
    state sharded over the ranks (gloo on the CPU, NCCL on CUDA); a model's `shard_units()`
    (the Llama's blocks) are units of their own, the rest belongs to the root. Under amp a
    Llama's precision is the sharding's (`policy`)."""

    def wrap_model(self, model, spec, device, amp_dtype=None):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (spec.dist.world_size,))
        self.layout = {"mesh": {"data": spec.dist.world_size}, "fsdp": "each block and the root"}
        policy = self.policy(model, amp_dtype)
        for unit in getattr(model, "shard_units", list)():
            fully_shard(unit, mesh=mesh, **policy)
        return fully_shard(model, mesh=mesh, **policy)

    def policy(self, model, amp_dtype) -> dict:
        """fully_shard's mixed precision, as torchtitan trains: under amp a Llama's (a model with
        `shard_units`) parameters are all-gathered and computed in amp's dtype (half the bytes of
        float32 gathers), its gradients reduce-scattered in float32 into the float32 shards
        that AdamW steps. The runner then runs no autocast, whose cache would keep a cast of
        every weight, unsharded, for the whole forward. Other models keep autocast (a batch
        norm's parameters in float16 are not what their recipes train)."""
        if amp_dtype is None or not hasattr(model, "shard_units"):
            return {}
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy

        self.mixed_precision = MixedPrecisionPolicy(param_dtype=amp_dtype, reduce_dtype=torch.float32)
        return {"mp_policy": self.mixed_precision}

    def gradient_sync(self, model, last: bool):
        # FSDP2's no_sync: unsharded gradients accumulate until the last micro-batch's
        # backward reduce-scatters their sum (as torchtitan accumulates); a setting, not a context.
        model.set_requires_gradient_sync(last)
        return contextlib.nullcontext()


@STRATEGIES.binds("fsdp_tp")
class FSDPTensorParallel(FSDP):
    """A 2-D DeviceMesh (data, tensor): tensor parallelism over a node's devices, FSDP2 across
    the nodes (docs/frameworks/llm.md). In each Llama block, q/k/v and gate/up are split by
    output columns (heads, FFN units) and o/down by input rows, so a block's only traffic is
    one all-reduce after attention and one after the FFN (Megatron-LM's layout, as torchtitan
    applies it with ColwiseParallel/RowwiseParallel); embeddings, norms and head stay whole
    within a tensor group. The ranks of a tensor group read the same sequences: their data
    shard is the node's (`data_shard`), batch × its devices sequences."""

    def data_shard(self, spec) -> tuple[int, int, int]:
        tensor = spec.dist.local_world_size
        return spec.dist.rank // tensor, spec.dist.world_size // tensor, tensor

    def wrap_model(self, model, spec, device, amp_dtype=None):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        _, data, tensor = self.data_shard(spec)
        mesh = init_device_mesh(device.type, (data, tensor), mesh_dim_names=("data", "tensor"))
        self.layout = {
            "mesh": {"data": data, "tensor": tensor},
            "tensor_parallel": "blocks: q k v gate up by columns, o down by rows; embeddings, norms, head whole",
            "fsdp": "each block and the root",
        }
        columns, rows = ColwiseParallel(), RowwiseParallel()
        plan = {name: columns for name in ("attention.q", "attention.k", "attention.v", "ffn.gate", "ffn.up")}
        plan |= {"attention.o": rows, "ffn.down": rows}
        policy = self.policy(model, amp_dtype)
        for unit in model.shard_units():
            parallelize_module(unit, mesh["tensor"], plan)
            fully_shard(unit, mesh=mesh["data"], **policy)
        return fully_shard(model, mesh=mesh["data"], **policy)


@STRATEGIES.binds("horovod")
class Horovod(Single):
    """Horovod over Gloo (NCCL on GPUs) without horovodrun (dlbench.runners._horovod): the
    optimizer all-reduces gradients; every rank starts from rank 0's state."""

    hvd = None
    rendezvous = None

    def start(self, spec, device) -> None:
        from dlbench.runners import _horovod

        self.hvd, self.rendezvous = _horovod.start("horovod.torch", spec.dist)
        self.backward_passes = run_training_options(spec.coords).grad_accum

    def wrap_optimizer(self, optimizer, model):
        hvd = self.hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        # Horovod's own accumulation: it all-reduces after the step's last backward pass.
        return hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(), backward_passes_per_step=self.backward_passes
        )

    def close(self) -> None:
        if self.hvd is None:
            return
        self.hvd.shutdown()
        if self.rendezvous is not None:
            self.rendezvous.stop()


def precision_record(policy, autocast_dtype, model) -> dict | None:
    """The header's framework.mixed_precision, how amp ran, read from the live objects: FSDP2's
    policy as fully_shard was given it (a dtype None: the parameters' own) beside the dtype of
    the sharded parameters the optimizer steps, or autocast's dtype; None under fp32."""
    if policy is not None:
        fields = {f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)}
        master = next(model.parameters()).dtype
        return {"name": "fsdp MixedPrecisionPolicy", **_plain(fields), "sharded_param_dtype": _plain(master)}
    if autocast_dtype is not None:
        return {"name": "torch.autocast", "dtype": _plain(autocast_dtype)}
    return None


def _plain(value):
    """A dtype as its name ("bfloat16"); a dict of them, item by item; anything else as is."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return str(value).removeprefix("torch.") if type(value).__name__ == "dtype" else value


def for_run(spec):
    """The strategy object of `spec`, by the class its strategy's name is bound to."""
    return STRATEGIES(spec.coords.strategy)()
