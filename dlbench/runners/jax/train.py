"""The JAX training state and step: one `jax.jit` executable per step with the state donated
(updated in place), optax SGD with momentum, softmax cross-entropy; what the header records
of the optimizer. Imports JAX: only `Runner.build` imports this module."""

from __future__ import annotations

import inspect
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlbench.recipe import SGD_MOMENTUM
from dlbench.runners._hyperparameters import linear_schedule, optimizer_record

OPTIMIZER = "sgd"  # the CNNs' optax optimizer (with momentum)


def injected(name: str, **settings):
    """optax's optimizer `name` ("sgd", "adamw") with its numeric settings and schedules held in
    its state (optax.inject_hyperparams), where `training_record` reads them back."""
    return optax.inject_hyperparams(getattr(optax, name))(**settings)


def training_record(name: str, state, schedule=None) -> dict:
    """The header's framework.optimizer (dlbench.runners._hyperparameters): the settings in the
    injected optimizer's state (`name`'s; optax keeps its flags, such as nesterov, out of the
    state and at its defaults here), the rate the live `schedule` ends at in place of the
    state's current rate, and the schedule."""
    hyperparams = optax.tree_utils.tree_get(state, "hyperparams")
    # A replicated scalar: its local copy (a multi-process array is not fully addressable).
    settings = {key: np.asarray(value.addressable_data(0)) for key, value in hyperparams.items()}
    rates = "constant"
    if schedule is not None:
        rates = schedule_record(schedule)
        settings["learning_rate"] = rates.get("end_learning_rate", settings["learning_rate"])
    return optimizer_record(name, settings, rates)


def schedule_record(schedule) -> dict:
    """An optax polynomial schedule (linear_schedule: power 1), read from its function's closure,
    as the shared linear record; another schedule as its name and closure's numbers."""
    values = inspect.getclosurevars(schedule).nonlocals
    if values.get("power") == 1 and values.get("transition_begin") == 0:
        return linear_schedule(values["init_value"], values["end_value"], values["transition_steps"])
    return {"name": schedule.__qualname__, **{k: v for k, v in values.items() if isinstance(v, (int, float))}}


def initial_state(model, size: int, seed: int, sharding, learning_rate: float):
    """(params, batch_stats, opt_state, step) computed on the devices of `sharding` (every
    process computes the same values: no host copy), and the optimizer."""
    optimizer = injected(OPTIMIZER, learning_rate=learning_rate, momentum=SGD_MOMENTUM)

    def init():
        keys = {"params": jax.random.key(seed), "dropout": jax.random.key(seed + 1)}
        variables = model.init(keys, jnp.zeros((1, size, size, 3), jnp.float32), train=False)
        params = variables["params"]
        return params, variables.get("batch_stats", {}), optimizer.init(params), jnp.zeros((), jnp.uint32)

    return jax.jit(init, out_shardings=sharding)(), optimizer


def train_step(model, optimizer, seed: int, replicated):
    """step(state, images, labels) -> (state, loss), jitted, the state's buffers donated.
    Dropout draws its mask from the step count (the same sequence in every process)."""
    dropout_key = jax.random.key(seed + 2)

    def step(state, images, labels):
        params, batch_stats, opt_state, count = state

        def loss_fn(params):
            logits, updated = model.apply(
                {"params": params, "batch_stats": batch_stats},
                images,
                train=True,
                mutable=["batch_stats"],
                rngs={"dropout": jax.random.fold_in(dropout_key, count)},
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()
            return loss, updated.get("batch_stats", {})

        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), batch_stats, opt_state, count + 1), loss

    # Outputs pinned replicated: the next step's input state has the sharding the step was
    # compiled for (an ahead-of-time executable refuses any other; compile_step below).
    return jax.jit(step, donate_argnums=(0,), out_shardings=replicated)


# jax.monitoring's event for an executable read from the persistent cache (jax/_src/compiler.py).
CACHE_HIT = "/jax/compilation_cache/cache_hits"


def compile_step(step, state, *inputs):
    """The step's executable, compiled ahead of the first step so that no timed step holds
    the compile (not even with no warm-up), and a record of it: seconds, and whether JAX's
    persistent cache (JAX_COMPILATION_CACHE_DIR) served it ("off": no cache directory)."""
    events = []

    def listen(event, **kwargs):
        events.append(event)

    jax.monitoring.register_event_listener(listen)
    start = time.perf_counter()
    try:
        compiled = step.lower(state, *inputs).compile()
    finally:
        jax.monitoring.unregister_event_listener(listen)
    cache_dir = jax.config.jax_compilation_cache_dir
    return compiled, {
        "seconds": round(time.perf_counter() - start, 3),
        "persistent_cache": "off" if not cache_dir else "hit" if CACHE_HIT in events else "miss",
        "cache_dir": cache_dir,
        "memory": compiled_memory(compiled),
    }


def compiled_memory(compiled) -> dict | None:
    """XLA's memory analysis of a compiled step, in bytes, and the device memory it implies:
    arguments + outputs + temporaries - what the outputs alias (the donated state). On an
    H200 it was the measured peak to 5 KB of 33.6 GB (docs/memory.md). None where the backend
    gives none."""
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 (a backend without the analysis: nothing to record)
        return None
    if analysis is None:
        return None
    sizes = {
        name: int(getattr(analysis, f"{name}_size_in_bytes", 0) or 0)
        for name in ("argument", "output", "temp", "alias")
    }
    return {**sizes, "peak": sizes["argument"] + sizes["output"] + sizes["temp"] - sizes["alias"]}


def synthetic_batch(batch: int, size: int, seed: int, classes: int):
    """Images (NHWC, float32) and labels, created once on the host."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch, size, size, 3), dtype=np.float32)
    return images, rng.integers(0, classes, batch).astype(np.int32)


def placement(devices: list):
    """(data, replicated) shardings: a one-axis mesh over `devices` (every process's), the batch
    split along it and the state replicated (XLA all-reduces the gradients)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices), ("data",))
    return NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())


def start_distributed(dist, on_cpu: bool) -> None:
    """Join the run's processes (one per node): rank 0 coordinates at master_addr:master_port;
    CPU collectives through Gloo (NCCL on GPUs)."""
    if on_cpu:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"{dist.master_addr}:{dist.master_port}",
        num_processes=dist.world_size,
        process_id=dist.rank,
    )
