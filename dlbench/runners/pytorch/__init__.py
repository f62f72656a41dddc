"""PyTorch runner: torchvision CNNs (SGD with momentum), Hugging Face BertForPreTraining
(Adam), its own Llama (AdamW; llm.py, docs/frameworks/llm.md), one workload object per model
kind (workloads.py), DDP, FSDP2 or pipeline stages across devices. docs/frameworks/pytorch.md
explains the fast path, the input pipelines and the strategies. Importing this package does
not import torch."""

from __future__ import annotations

from dlbench.coords import MIXED_PRECISIONS
from dlbench.runners import _horovod, precision_problem, training_option_unavailable
from dlbench.runners._hyperparameters import linear_schedule, loss_scaling_record, optimizer_record
from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.base import TrainingOptions, address_space_capped, run_training_options
from dlbench.runners.plugin import Capabilities, Option, Strategy
from dlbench.runners.pytorch import (
    clock,
    float8,
    pipeline_parallel,  # noqa: F401 (binds pp and fsdp_pp)
    strategies,
)
from dlbench.runners.pytorch.collectives import allreduce_times  # noqa: F401 (the prescreen's, by name)
from dlbench.runners.pytorch.workloads import WORKLOADS

CAPABILITIES = Capabilities(
    label="PyTorch",
    colour="#d62728",
    models=WORKLOADS.models,  # what its workloads train (workloads.py)
    # fp8: amp (bf16) with the Llama's linear layers in float8, torchao (float8.py); on devices
    # with float8 matmuls, or emulated where the fp8_emulation option asks for it.
    precisions=("fp32", "amp", "fp8"),
    emulated_precisions={"fp8": "fp8_emulation"},
    data=("synthetic", "real"),
    image_format="imagefolder",
    # ImageFolder links; BERT examples are tokenised with Hugging Face tokenizers (transformers).
    converts=("imagefolder", "bert"),
    strategies=(
        Strategy(
            "ddp",
            "PyTorch DistributedDataParallel: synchronous data parallelism, gradients all-reduced every step "
            "(gloo on CPU, NCCL on GPU)",
        ),
        Strategy(
            "fsdp",
            "PyTorch FSDP2 (fully_shard, each Llama block a unit): parameters, gradients and optimizer state "
            "sharded over the devices, gathered per unit for its forward and backward (gloo on CPU, NCCL on GPU)",
            shards_state=True,
        ),
        Strategy(
            "fsdp_tp",
            "PyTorch 2-D DeviceMesh: tensor parallelism over a node's devices (each Llama block's heads and "
            "FFN split, ColwiseParallel/RowwiseParallel), FSDP2 across nodes (gloo on CPU, NCCL on GPU)",
            tensor_parallel=True,
            shards_state=True,
        ),
        Strategy(
            "pp",
            "PyTorch pipeline parallelism (torch.distributed.pipelining): the Llama's blocks split into stages "
            "across the devices, micro-batches driven by the cell's schedule (1F1B, interleaved, zero bubble), "
            "the loss on the last stage (gloo on CPU, NCCL on GPU)",
            pipeline="devices",
            model_kinds=("llm",),
            kind_reason="its stages are a Llama's blocks",
        ),
        Strategy(
            "fsdp_pp",
            "PyTorch 2-D DeviceMesh: pipeline stages across the nodes (torch.distributed.pipelining), FSDP2 "
            "over a node's devices within each stage (gloo on CPU, NCCL on GPU)",
            pipeline="nodes",
            shards_state=True,
            model_kinds=("llm",),
            kind_reason="its stages are a Llama's blocks",
        ),
        # Horovod does not build against the locked torch (README, Strategies): its cells say why.
        _horovod.strategy(),
    ),
    device_envs={"cuda": "pytorch-cuda"},  # envs/pytorch-cuda.txt (docs/gpu.md)
    allreduce=True,  # collectives.allreduce_times: the communication prescreen
    profiler="torch.profiler",  # a profiled run's trace (dlbench.runners.profilers)
    options=(
        Option(
            "dali",
            True,
            "real images through NVIDIA DALI on CUDA where it is installed (seed 002's pipeline); "
            "false: torchvision's DataLoader",
        ),
        Option(
            "fp8_emulation",
            False,
            "fp8 cells in torchao's float8 emulation (Float8LinearConfig(emulate=True)) on every device, "
            "the CPU too: float8 casts and scales, float32 matmuls; a correctness path, not a speed figure",
        ),
    ),
)


def _training_options(spec) -> TrainingOptions:
    """The run's activation checkpointing and micro-batches a step, refused where its workload
    declares them not (the grid plans such a cell as unavailable with the same reason)."""
    options = run_training_options(spec.coords)
    reason = training_option_unavailable("pytorch", spec.coords.model, *options)
    if reason:
        raise ValueError(reason)
    return options


def _check_float8(spec, torch, device) -> None:
    """fp8's refusals before anything is built: a model its workload does not convert (planning
    stops such a grid), and a device without float8 matmuls unless emulation is asked for
    (planning makes a named one N/A; an unnamed GPU is found out here)."""
    reason = precision_problem(spec.coords.framework, spec.coords.model, "fp8") or float8.device_problem(
        torch, device, spec.options["fp8_emulation"]
    )
    if reason:
        raise ValueError(reason)


def _library_versions(torch) -> dict:
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }


class Runner(BaseRunner):
    libraries: dict | None = None  # import_framework's _library_versions

    def import_framework(self) -> None:
        import torch

        WORKLOADS(self.spec.coords.model).import_framework()
        # Read before the worker's address-space cap: cuDNN's version loads the library, and a
        # refused mapping there ends the process (no exception, so no step log) instead of raising.
        self.libraries = _library_versions(torch)
        if self.spec.coords.precision == "fp8":
            try:
                import torchao.float8  # noqa: F401
            except ImportError as error:
                raise ImportError(f"fp8 trains with torchao's float8 (envs/pytorch.txt pins it): {error}") from error

    def build(self) -> None:
        import torch

        spec = self.spec
        self.torch = torch
        torch.manual_seed(spec.seed)
        torch.set_num_threads(spec.threads)
        self.device = self._device()
        self.grad_accum = _training_options(spec).grad_accum
        fp8 = spec.coords.precision == "fp8"
        if fp8:
            _check_float8(spec, torch, self.device)
        self.strategy = strategies.for_run(spec)
        self.pipelined = self.strategy.schedules_micro_batches
        self.strategy.start(spec, self.device)
        # The run's model kind picks its workload (workloads.py): model, optimizer, data, loss.
        self.workload = WORKLOADS(spec.coords.model)(spec, torch, self.device)
        model = self.workload.model()
        self.params = sum(p.numel() for p in model.parameters() if p.requires_grad)
        on_cuda = self.device.type == "cuda"
        amp = spec.coords.precision in MIXED_PRECISIONS  # fp8: amp with float8 linear layers
        self.compute_dtype = self.workload.autocast_dtype(on_cuda) if amp else None
        # Converted before the strategy wraps it and torch.compile traces it, as torchtitan does.
        self.float8 = None
        if fp8:
            self.float8 = float8.convert(torch, model, self.workload.float8_keep, spec.options["fp8_emulation"])
        model = self.distributed_model = self.strategy.wrap_model(model, spec, self.device, self.compute_dtype)
        if spec.compile:
            # Static shapes, as the compiled baseline (benchmarks/baselines/pytorch_compiled.py).
            model = torch.compile(model, dynamic=False)
        self.model = model.train()
        self.real_data = spec.coords.data == "real"
        # A strategy whose sharding casts the parameters (FSDP2's policy) needs no autocast.
        self.autocast_dtype = None if self.strategy.mixed_precision else self.compute_dtype
        self.scaler = torch.amp.GradScaler("cuda") if self.autocast_dtype == torch.float16 else None
        self._optimizer()
        generator = torch.Generator().manual_seed(spec.seed)
        self.batches = self.workload.inputs(generator, self.strategy, self.real_data)
        # On CUDA, steps are timed by events and the queue drained at the window's ends only
        # (docs/gpu.md); benchmarks/gpu_check.py sets it False to measure per-step sync's cost.
        self.window_sync = on_cuda

    def _device(self):
        torch, spec = self.torch, self.spec
        if spec.device != "cuda":
            return torch.device("cpu")
        torch.cuda.set_device(spec.dist.local_rank)
        torch.backends.cudnn.benchmark = True
        return torch.device("cuda", spec.dist.local_rank)

    def _optimizer(self) -> None:
        torch = self.torch
        optimizer, self.schedule = self.workload.optimizer(self.model.parameters(), self.spec.compile)
        self.optimizer = self.strategy.wrap_optimizer(optimizer, self.model)
        self.optimizer_step = self.optimizer.step
        # Inductor fuses the foreach update into one kernel; a strategy's own optimizer
        # (Horovod's, with its allreduce hooks) stays eager, and so does the step that fp16's
        # GradScaler calls (scaler.step runs the optimizer's own, uncompiled, step).
        self.compiled_optimizer = self.spec.compile and self.optimizer is optimizer and self.scaler is None
        if self.compiled_optimizer:
            self.optimizer_step = torch.compile(self.optimizer.step, dynamic=False)

    def next_batch(self):
        if not self.real_data:
            return None
        batch = next(self.batches)
        return [t.to(self.device, non_blocking=True) for t in batch]

    def _loss(self, batch=None):
        """The workload's loss of `batch` (None: the synthetic batch); dlbench.analysis.flops
        counts a step's FLOPs through it."""
        return self.workload.loss(self.model, batch)

    def step(self, batch=None):
        """One optimizer update after the forward and backward passes of the step's
        micro-batches (one without gradient accumulation); the loss is their mean."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.pipelined:
            loss = self._pipeline(batch)
        else:
            parts = self.workload.micro_batches(batch, self.grad_accum)
            loss = self._backward(parts[0], 1) if len(parts) == 1 else self._accumulate(parts)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer_step()
        if self.schedule is not None:
            self.schedule.step()
        return loss

    def _pipeline(self, batch):
        """A pipeline-parallel step: the strategy's schedule runs the micro-batches' forward
        and backward passes over its stages (under autocast where amp asks for it)."""
        tokens = self.workload.step_tokens(batch)
        if self.autocast_dtype is None:
            return self.strategy.train_step(tokens)
        with self.torch.autocast(self.device.type, dtype=self.autocast_dtype):
            return self.strategy.train_step(tokens)

    def _accumulate(self, parts: list):
        """Gradient accumulation: the micro-batches' gradients summed, each loss scaled by
        1 / len(parts), the ranks synchronising after the last one only; their mean loss."""
        losses = []
        for index, part in enumerate(parts):
            with self.strategy.gradient_sync(self.distributed_model, last=index == len(parts) - 1):
                losses.append(self._backward(part, len(parts)))
        return self.torch.stack(losses).mean()

    def _backward(self, batch, micro_batches: int):
        """The forward and backward pass of one micro-batch, its loss scaled by 1 / micro_batches
        so that the accumulated gradient is the whole step's mean; returns the unscaled loss."""
        if self.autocast_dtype is not None:
            with self.torch.autocast(self.device.type, dtype=self.autocast_dtype):
                loss = self._loss(batch)
        else:
            loss = self._loss(batch)
        scaled = loss / micro_batches if micro_batches > 1 else loss
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
        return loss.detach()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def step_events(self, steps: int):
        return clock.CudaStepEvents(self.torch, steps) if getattr(self, "window_sync", False) else None

    def timing(self) -> dict:
        if getattr(self, "window_sync", False):
            return {"clock": clock.CLOCK, "sync": "window"}
        return super().timing()

    def loss_value(self, handle) -> float:
        return self.strategy.loss_value(handle) if self.pipelined else float(handle)

    def step_details(self) -> list[dict] | None:
        return self.strategy.step_details() if self.pipelined else None

    def device_memory(self) -> dict | None:
        if getattr(self, "device", None) is None or self.device.type != "cuda":
            return None
        cuda = self.torch.cuda
        return {
            "peak_bytes": int(cuda.max_memory_allocated(self.device)),
            "reserved_bytes": int(cuda.max_memory_reserved(self.device)),
            "limit_bytes": int(cuda.get_device_properties(self.device).total_memory),
            "method": "torch.cuda.max_memory_allocated (tensors) and max_memory_reserved (caching allocator)",
        }

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        oom_types = (getattr(self.torch, "OutOfMemoryError", ()),) if hasattr(self, "torch") else ()
        text = str(exc)
        if isinstance(exc, oom_types) or "out of memory" in text or "DefaultCPUAllocator: can't allocate" in text:
            return True
        # oneDNN reports an allocation that the address-space cap refused as a failed primitive.
        return "could not create a primitive" in text and address_space_capped()

    def describe(self) -> dict:
        torch = self.torch
        # AMP's dtype (fp16 + GradScaler on CUDA, bf16 on the CPU), named as JAX's header does.
        compute_dtype = getattr(self, "compute_dtype", None) or torch.float32
        info = {
            **(self.libraries or _library_versions(torch)),  # read here when built without import_framework
            "device_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(),
            "trainable_params": self.params,
            "optimizer": training_record(self.optimizer, self.schedule, self.scaler),
            "seed": torch.initial_seed(),
            **self.workload.describe(),
            "compute_dtype": str(compute_dtype).removeprefix("torch."),
            "mixed_precision": strategies.precision_record(
                self.strategy.mixed_precision, self.autocast_dtype, self.distributed_model
            ),
            "torch_compile": self._compiled(),
        }
        if getattr(self, "float8", None):
            info["float8"] = self.float8
        if getattr(self, "real_data", False):
            info["input_pipeline"] = self.workload.input_pipeline()
        if self.workload.dataset is not None:
            info["dataset"] = self.workload.dataset
        if self.strategy.layout:
            info["parallel_layout"] = self.strategy.layout
        if self.device.type == "cuda":
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        return info

    def _compiled(self) -> str | None:
        if not self.spec.compile:
            return None
        return "model and optimizer step" if getattr(self, "compiled_optimizer", False) else "model"

    def close(self) -> None:
        if getattr(self, "strategy", None) is not None:
            self.strategy.close()


def training_record(optimizer, schedule, scaler) -> dict:
    """The header's framework.optimizer (dlbench.runners._hyperparameters), read from the
    optimizer's first parameter group (the workloads give every group the same settings),
    its learning-rate scheduler and its GradScaler."""
    settings = {key: value for key, value in optimizer.param_groups[0].items() if key not in ("params", "initial_lr")}
    rates = schedule_record(schedule)
    if isinstance(rates, dict) and "end_learning_rate" in rates:
        settings["lr"] = rates["end_learning_rate"]
    scaling = None
    if scaler is not None and scaler.is_enabled():
        scaling = loss_scaling_record(
            "torch.amp.GradScaler",
            dynamic=True,
            scale=scaler.get_scale(),
            growth_interval=scaler.get_growth_interval(),
            growth_factor=scaler.get_growth_factor(),
            backoff_factor=scaler.get_backoff_factor(),
        )
    return optimizer_record(type(optimizer).__name__, settings, rates, scaling)


def schedule_record(schedule):
    """The learning-rate schedule's record: "constant" without a scheduler, LinearLR as the
    shared linear record, any other scheduler as its class and its state_dict's settings."""
    if schedule is None:
        return "constant"
    if type(schedule).__name__ == "LinearLR":
        base = schedule.base_lrs[0]
        return linear_schedule(base * schedule.start_factor, base * schedule.end_factor, schedule.total_iters)
    settings = {k: v for k, v in schedule.state_dict().items() if not k.startswith("_") and k != "last_epoch"}
    return {"name": type(schedule).__name__, **settings}
