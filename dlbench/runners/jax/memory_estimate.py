"""A process's peak memory before launch: XLA's memory analysis of the runner's own LLM step,
compiled for abstract arguments (shapes, dtypes and shardings: nothing is allocated) on the
run's mesh, as MaxText prints before it trains. Planning starts it in the jax environment
(dlbench.planning.compiled), one process per shape (XLA reads the device count once): a JSON
list of one request on stdin, one JSON result on stdout. Stdlib and JAX only.

    python -m dlbench.runners.jax.memory_estimate < request.json

The result: `tensors` (arguments + outputs + temporaries − aliased, per device, times the
devices this process drives: one process per node), `runtime` (on the CPU the resident set
after the compile, no state allocated: what the process holds besides its buffers), or `error`.
"""

from __future__ import annotations

import json
import os
import sys

from dlbench.runners.base import status_kb


def _spec(request: dict):
    from dlbench.coords import RunCoords, Scale
    from dlbench.runners.base import RunSpec

    coords = RunCoords(**request["coords"])
    devices = Scale.parse(coords.scale).devices
    return RunSpec(coords, int(coords.batch), 0, request["seq_len"], 1, request["device"], local_devices=devices)


def compiled_step(spec, jax):
    """The LLM workload's step (dlbench.runners.jax.llm) compiled for abstract arguments: the
    state as jax.eval_shape gives it, each leaf with the strategy's sharding, and the tokens of
    every device (a multi-node mesh is this process's devices: the partition is the same)."""
    import jax.numpy as jnp

    from dlbench.runners.base import run_training_options
    from dlbench.runners.jax import llm, strategies

    checkpointing, micro_batches = run_training_options(spec.coords)
    dtype = jnp.bfloat16 if spec.coords.precision == "amp" else jnp.float32
    strategy = strategies.STRATEGIES(spec.coords.strategy)(spec, jax.devices()[: spec.local_devices])
    module = llm.Llama(
        spec.coords.model, dtype, checkpointing, llm.attention_implementation(jax.default_backend(), dtype)
    )
    optim = llm.optimizer(llm.warmup())
    state, shardings = llm.abstract_state(module, 0, strategy, optim)
    rows = spec.batch * micro_batches * spec.local_devices
    tokens = jax.ShapeDtypeStruct((rows, spec.seq_len + 1), jnp.int32, sharding=strategy.data)
    step = llm.train_step(module, optim, shardings, strategy, micro_batches)
    return step.lower(state, tokens).compile()


def estimate(request: dict) -> dict:
    spec = _spec(request)
    if spec.local_devices > 1 and spec.device == "cpu":
        flag = f"--xla_force_host_platform_device_count={spec.local_devices}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu" if spec.device == "cpu" else "cuda")
    import jax

    from dlbench.coords import Scale
    from dlbench.runners.jax import train

    memory = train.compiled_memory(compiled_step(spec, jax))
    if memory is None:
        return {"error": f"XLA gives no memory analysis on {jax.default_backend()}"}
    # On a GPU a run measures one device; on the CPU the process, which drives a node's devices.
    per_process = Scale.parse(spec.coords.scale).devices_per_node if spec.device == "cpu" else 1
    return {"tensors": memory["peak"] * per_process, "runtime": (status_kb("VmRSS") or 0) * 1024, "xla": memory}


def main() -> None:
    (request,) = json.load(sys.stdin)
    try:
        result = estimate(request)
    except Exception as error:  # noqa: BLE001 (reported to planning, which falls back)
        result = {"error": f"{type(error).__name__}: {str(error).strip()[:300]}"}
    json.dump([result], sys.stdout)


if __name__ == "__main__":
    main()
