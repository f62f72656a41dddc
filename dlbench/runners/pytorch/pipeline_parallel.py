"""PyTorch pipeline parallelism: `pp` (every device a pipeline rank) and `fsdp_pp` (a pipeline
rank per node, FSDP2 over a node's devices), with torch.distributed.pipelining's stages and
schedules (docs/frameworks/llm.md, "Pipeline parallelism"). The stages are dlbench.pipelining's
split of the Llama's blocks; the loss is computed on the last stage, per micro-batch, and each
rank's bubble is measured as the share of the schedule's time its stages did not compute.
Importing this module does not import torch."""

from __future__ import annotations

import contextlib
import time

from dlbench import pipelining
from dlbench.runners.pytorch.strategies import DDP, FSDP, STRATEGIES

clock = time.perf_counter


@STRATEGIES.binds("pp")
class PipelineParallel(DDP):
    """Stages across every device: one pipeline, all ranks read the same sequences (batch ×
    devices of them), the first stage the inputs, the last the targets."""

    schedules_micro_batches = True  # the runner hands a step's tokens to `train_step`
    shard_state = False  # fsdp_pp: FSDP2 over the ranks of a stage (a node's devices)

    def pipeline_ranks(self, spec) -> int:
        return spec.dist.world_size

    def data_shard(self, spec) -> tuple[int, int, int]:
        ranks = self.pipeline_ranks(spec)
        data = spec.dist.world_size // ranks
        return spec.dist.rank % data, data, ranks

    def wrap_model(self, model, spec, device, amp_dtype=None):
        """The rank's stages of `model` (an nn.ModuleList: their parameters are the optimizer's)
        and the schedule that drives them."""
        import torch
        from torch.distributed.device_mesh import init_device_mesh

        if spec.compile:
            raise ValueError(f"{spec.coords.strategy} does not compile its stages yet (run.compile)")
        ranks, model_name = self.pipeline_ranks(spec), spec.coords.model
        self.plan = pipelining.schedule(spec.coords.pp_schedule)
        mesh = init_device_mesh(device.type, (ranks, spec.dist.world_size // ranks), mesh_dim_names=("pp", "data"))
        self.group, self.ranks = mesh["pp"].get_group(), ranks
        stages = ranks * self.plan.stages_per_rank
        self.split = pipelining.split_layers(model_name, stages)
        self.stage_ids = [mesh["pp"].get_local_rank() + k * ranks for k in range(self.plan.stages_per_rank)]
        modules = [self._stage_module(model, index, mesh, amp_dtype) for index in self.stage_ids]
        self._schedule(modules, stages, device, spec.coords.pp_microbatches)
        self.bubbles: list[float] = []
        self.layout = self._layout(mesh, stages, spec.coords.pp_microbatches)
        return torch.nn.ModuleList(modules)

    def _stage_module(self, model, index: int, mesh, amp_dtype):
        from dlbench.runners.pytorch import llm

        return llm.LlamaStage(model, *self.split[index])

    def _schedule(self, modules, stages: int, device, microbatches: int) -> None:
        from torch.distributed.pipelining import PipelineStage, schedules

        from dlbench.runners.pytorch import llm

        self.busy = 0.0
        self.stages = [
            PipelineStage(module, index, stages, device, group=self.group)
            for module, index in zip(modules, self.stage_ids, strict=True)
        ]
        for stage in self.stages:
            for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
                setattr(stage, name, self._timed(getattr(stage, name), device))
        schedule_class = getattr(schedules, self.plan.torch_class)
        held = self.stages[0] if self.plan.stages_per_rank == 1 else self.stages
        # scale_grads: each micro-batch's loss is its mean, the gradients are divided by m,
        # so the step's gradient is the whole batch's mean, as one device computes it.
        self.schedule = schedule_class(
            held, n_microbatches=microbatches, loss_fn=self._timed(llm.logits_loss, device), scale_grads=True
        )
        self.first = any(stage.is_first for stage in self.stages)
        self.last = any(stage.is_last for stage in self.stages)

    def _timed(self, work, device):
        """`work`, its wall time added to the rank's busy time (on CUDA after a sync, so that
        the time is the kernels')."""
        import torch

        def run(*args, **kwargs):
            start = clock()
            try:
                return work(*args, **kwargs)
            finally:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                self.busy += clock() - start

        return run

    def train_step(self, tokens):
        """One step's forward and backward passes through the schedule; the mean of the
        micro-batches' losses on the last stage's rank (None elsewhere: `loss_value` asks it)."""
        import torch

        losses = [] if self.last else None
        inputs = (tokens[:, :-1],) if self.first else ()
        self.busy, start = 0.0, clock()
        # return_outputs=False: the last stage would keep every micro-batch's logits, and
        # their concatenation, to the step's end; the losses are all a step reports.
        self.schedule.step(*inputs, target=tokens[:, 1:] if self.last else None, losses=losses, return_outputs=False)
        window = clock() - start
        self.bubbles.append(min(1.0, max(0.0, 1.0 - self.busy / window)) if window > 0 else 0.0)
        return torch.stack(losses).mean().detach() if self.last else None

    def loss_value(self, handle) -> float:
        """The step's loss on every rank of the pipeline: the last stage's, broadcast (called in
        step order after the timed loop, on every rank alike)."""
        import torch
        import torch.distributed as dist

        value = handle.float().reshape(1) if handle is not None else torch.zeros(1)
        dist.broadcast(value, group=self.group, group_src=self.ranks - 1)
        return float(value)

    def step_details(self) -> list[dict]:
        return [{"bubble": round(bubble, 6)} for bubble in self.bubbles]

    def gradient_sync(self, model, last: bool):
        return contextlib.nullcontext()

    def _layout(self, mesh, stages: int, microbatches: int) -> dict:
        return {
            "mesh": {"pp": self.ranks, "data": mesh["data"].size()},
            "pipeline": {
                "schedule": f"{self.plan.name} (torch {self.plan.torch_class})",
                "stages": stages,
                "stages_here": self.stage_ids,
                "blocks_per_stage": [last - first for first, last in self.split],
                "blocks_here": [list(range(*self.split[index])) for index in self.stage_ids],
                "microbatches": microbatches,
                "theoretical_bubble": round(self.plan.bubble(self.ranks, microbatches), 6),
                "bubble_formula": self.plan.theory,
                "split": "contiguous blocks balanced by matmul parameters, the head on the last stage",
            },
            **({"fsdp": "each stage's blocks and the stage, over the data axis"} if self.shard_state else {}),
        }


@STRATEGIES.binds("fsdp_pp")
class FSDPPipeline(PipelineParallel):
    """A 2-D mesh (pp, data): a pipeline rank per node, stages across the nodes, and FSDP2
    over a node's devices within each stage; each data shard is read by one pipeline."""

    shard_state = True

    def pipeline_ranks(self, spec) -> int:
        return spec.dist.world_size // spec.dist.local_world_size

    def _stage_module(self, model, index: int, mesh, amp_dtype):
        from torch.distributed.fsdp import fully_shard

        stage = super()._stage_module(model, index, mesh, amp_dtype)
        policy = FSDP.policy(self, model, amp_dtype)
        for unit in stage.shard_units():
            fully_shard(unit, mesh=mesh["data"], **policy)
        return fully_shard(stage, mesh=mesh["data"], **policy)
