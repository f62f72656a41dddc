"""The JAX runner's workloads, one object per model kind (dlbench.runners.base.Workload): Flax
CNNs with optax SGD momentum, and Llamas with optax AdamW on the strategy's mesh (llm.py). Each
builds its model, optimizer, batch and loss into one compiled step; the runner drives the one
`WORKLOADS(model)` names. Importing this module does not import JAX: `build` does."""

from __future__ import annotations

from dlbench.coords import ACTIVATION_CHECKPOINTING
from dlbench.llm import SHAPES as LLM_SHAPES
from dlbench.recipe import sgd_lr
from dlbench.runners.base import Workload, Workloads, run_training_options

WORKLOADS = Workloads("jax")

# What the header records of each activation-checkpointing mode (llm.remat_policy).
CHECKPOINTING_RECORD = {
    "none": "none",
    "selective": "selective: each decoder block under nn.remat, the outputs of its projections "
    "(dots_with_no_batch_dims_saveable) and of attention kept, the rest recomputed",
    "full": "full: each decoder block under nn.remat (nothing_saveable), recomputed in the backward pass",
}


class JaxWorkload(Workload):
    """What every JAX workload offers the runner: `build` returns the state, the inputs the step
    compiles for, the compiled step and its compile record; `batches` are the real-data batches
    (None: the inputs are the synthetic batch)."""

    memory_format: str | None = None
    optimizer_text = ""  # the optimizer, in the header's implementation

    def __init__(self, spec):
        self.spec = spec
        self.batches = None
        self.strategy = None
        self.params = 0

    def describe(self) -> dict:
        info = {}
        if self.batches is not None:
            from dlbench.data import tokens

            info["input_pipeline"] = self.input_pipeline
            info["dataset"] = tokens.header_record(self.batches.manifest)
        if self.strategy is not None and self.strategy.layout:
            info["parallel_layout"] = self.strategy.layout
        return info


@WORKLOADS.registers
class ImageClassification(JaxWorkload):
    """A Flax CNN (models.py, NHWC) with optax SGD momentum, its state replicated over a
    one-axis mesh of the run's devices and the batch split along it."""

    kind = "image"
    models = ("resnet50", "resnet152", "vgg16", "alexnet")  # models.MODELS (it imports Flax)
    memory_format = "NHWC"
    optimizer_text = "optax SGD momentum"

    def build(self, jax, devices, dtype):
        from dlbench.runners.jax import models, train

        spec, size = self.spec, self.spec.image_size
        model = models.build(spec.coords.model, dtype)
        # This process's share of the global batch (batch × its devices), put on its devices.
        rank = spec.dist.rank
        images, labels = train.synthetic_batch(spec.batch * spec.local_devices, size, spec.seed + rank, models.CLASSES)
        data, replicated = train.placement(devices)
        state, optimizer = train.initial_state(model, size, spec.seed, replicated, sgd_lr(spec))
        self.params = sum(int(x.size) for x in jax.tree_util.tree_leaves(state[0]))
        inputs = (
            jax.make_array_from_process_local_data(data, images),
            jax.make_array_from_process_local_data(data, labels),
        )
        step = train.train_step(model, optimizer, spec.seed, replicated)
        return (state, inputs, *train.compile_step(step, state, *inputs))

    def training_record(self, state) -> dict:
        """The header's framework.optimizer, read from the optimizer state in `state`."""
        from dlbench.runners.jax import train

        return train.training_record(train.OPTIMIZER, state)


@WORKLOADS.registers
class CausalLM(JaxWorkload):
    """A Llama (llm.py) on the strategy's mesh (strategies.py): the global batch's tokens split
    over its data (or fsdp) axis, the state where the strategy puts it, optax AdamW."""

    kind = "llm"
    models = tuple(LLM_SHAPES)
    activation_checkpointing = ACTIVATION_CHECKPOINTING  # per decoder block (llm.remat_policy)
    grad_accum = True  # a lax.scan over the step's micro-batches (llm.accumulate)
    optimizer_text = "optax AdamW, linear warm-up"
    input_pipeline = "numpy batches of packed byte-level tokens, seeded order per epoch, put on the devices"

    def build(self, jax, devices, dtype):
        from dlbench.runners.jax import llm, strategies

        spec = self.spec
        self.strategy = strategies.STRATEGIES(spec.coords.strategy)(spec, devices)
        self.schedule = llm.warmup()
        self.attention = llm.attention_implementation(jax.default_backend(), dtype)
        self.attention_fallback = None
        try:
            return self._build_step(jax, dtype)
        except Exception as exc:  # cuDNN's kernel may refuse a shape or a build: XLA's then
            if self.attention == "xla" or "cudnn" not in str(exc).lower():
                raise
            self.attention_fallback = f"cudnn refused ({str(exc).strip()[:300]}); xla ran"
            self.attention = "xla"
            return self._build_step(jax, dtype)

    def _build_step(self, jax, dtype):
        """(state, inputs, compiled step, compile record) with this workload's attention."""
        import time

        from dlbench.runners.jax import llm, train

        spec = self.spec
        checkpointing, micro_batches = run_training_options(spec.coords)
        module = llm.Llama(spec.coords.model, dtype, checkpointing, self.attention)
        data = self.strategy.data
        optim = llm.optimizer(self.schedule)
        started = time.perf_counter()
        state, shardings = llm.initial_state(module, spec.seq_len, spec.seed, self.strategy, optim)
        jax.block_until_ready(state)
        self.initial_state_seconds = round(time.perf_counter() - started, 3)
        self.params = sum(int(x.size) for x in jax.tree_util.tree_leaves(state[0]))
        if spec.coords.data == "real":
            self.batches = llm.TokenBatches(spec, spec.dist.world_size, spec.dist.rank, data)
            inputs = (next(self.batches),)  # the shapes the step compiles for; step 1 reads on
        else:
            tokens = llm.tokens(spec, spec.dist.world_size, spec.dist.rank)
            inputs = (jax.make_array_from_process_local_data(data, tokens),)
        step = llm.train_step(module, optim, shardings, self.strategy, micro_batches)
        return (state, inputs, *train.compile_step(step, state, *inputs))

    def training_record(self, state) -> dict:
        """The header's framework.optimizer, read from the optimizer state in `state` and the schedule."""
        from dlbench.runners.jax import llm, train

        return train.training_record(llm.OPTIMIZER, state, self.schedule)

    def describe(self) -> dict:
        from dlbench.runners.jax import llm

        checkpointing, micro_batches = run_training_options(self.spec.coords)
        attention = getattr(self, "attention", None)  # none where the build failed first
        info = {
            **super().describe(),
            "activation_checkpointing": CHECKPOINTING_RECORD[checkpointing],
            "grad_accum": micro_batches,
            "attention": llm.ATTENTION_RECORD.get(attention),
            "initial_state_seconds": getattr(self, "initial_state_seconds", None),
        }
        if getattr(self, "attention_fallback", None):
            info["attention_fallback"] = self.attention_fallback
        return info
