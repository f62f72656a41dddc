"""A process's peak memory before launch: XLA's memory analysis of the runner's own LLM step,
compiled for abstract arguments (shapes, dtypes and shardings: nothing is allocated) on the
run's mesh, as MaxText prints before it trains. Planning starts it in the jax environment
(dlbench.planning.compiled), one process per shape (XLA reads the device count once): a JSON
list of one request on stdin, one JSON result on stdout. Stdlib and JAX only.

    python -m dlbench.runners.jax.memory_estimate < request.json

The result: `tensors` (arguments + outputs + temporaries − aliased, per device, times the
devices this process drives: one process per node), `runtime` (on the CPU the resident set
after the compile, no state allocated: what the process holds besides its buffers), or `error`.

A CUDA request with `target_config` (the path of an XLA GpuTargetConfigProto text, e.g. the
device specs in XLA's xla/backends/gpu/target_config/specs/) is compiled with no GPU attached:
XLA's deviceless compile for that device (jax.experimental.topologies), in an environment with
JAX's CUDA plugin (docs/memory.md, "Deviceless").
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


def compiled_step(spec, jax, devices=None, backend: str | None = None):
    """The LLM workload's step (dlbench.runners.jax.llm) compiled for abstract arguments: the
    state as jax.eval_shape gives it, each leaf with the strategy's sharding, and the tokens of
    every device (a multi-node mesh is this process's devices: the partition is the same).
    `devices`, `backend`: a deviceless target's (jax.devices() and its backend by default)."""
    import jax.numpy as jnp

    from dlbench.runners.base import run_training_options
    from dlbench.runners.jax import llm, strategies

    checkpointing, micro_batches = run_training_options(spec.coords)
    dtype = jnp.bfloat16 if spec.coords.precision == "amp" else jnp.float32
    devices = list(devices or jax.devices())[: spec.local_devices]
    strategy = strategies.STRATEGIES(spec.coords.strategy)(spec, devices)
    attention = llm.attention_implementation(backend or jax.default_backend(), dtype)
    module = llm.Llama(spec.coords.model, dtype, checkpointing, attention)
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
    target = request.get("target_config") if spec.device == "cuda" else None
    # A deviceless compile runs on the CPU backend; its devices are the target's.
    os.environ.setdefault("JAX_PLATFORMS", "cpu" if spec.device == "cpu" or target else "cuda")
    import jax

    from dlbench.coords import Scale
    from dlbench.runners.jax import train

    devices, backend = (target_devices(jax, target, spec.local_devices), "gpu") if target else (None, None)
    memory = train.compiled_memory(compiled_step(spec, jax, devices, backend))
    if memory is None:
        return {"error": f"XLA gives no memory analysis on {jax.default_backend()}"}
    # On a GPU a run measures one device; on the CPU the process, which drives a node's devices.
    per_process = Scale.parse(spec.coords.scale).devices_per_node if spec.device == "cpu" else 1
    return {"tensors": memory["peak"] * per_process, "runtime": (status_kb("VmRSS") or 0) * 1024, "xla": memory}


def target_devices(jax, target_config: str, count: int) -> list:
    """`count` devices of the CUDA device `target_config` describes, one node's, none attached."""
    from jax.experimental import topologies

    with open(target_config, encoding="utf-8") as spec:
        text = spec.read()
    topology = topologies.get_topology_desc("dlbench", "cuda", target_config=text, topology=f"1x1x{count}")
    return list(topology.devices)


def main() -> None:
    (request,) = json.load(sys.stdin)
    try:
        result = estimate(request)
    except Exception as error:  # noqa: BLE001 (reported to planning, which falls back)
        result = {"error": f"{type(error).__name__}: {str(error).strip()[:300]}"}
    json.dump([result], sys.stdout)


if __name__ == "__main__":
    main()
