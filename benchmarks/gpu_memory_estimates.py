"""The compilers' memory estimates of a committed GPU campaign's LLM runs, made on this
(GPU-less) host as planning makes them, against the peaks those runs measured on the device.

    python benchmarks/gpu_memory_estimates.py --jax-python ENV/bin/python --target-config SPEC \
        [--pytorch-python .venvs/pytorch/bin/python] [CAMPAIGN ...]

CAMPAIGN: a folder with results/ (default: the three parts of campaigns/h200-llama1b-2026-11-28).
PyTorch: its estimator (fake tensors under the memory tracker) needs no device. JAX: XLA's
deviceless compile for the device SPEC describes (an XLA GpuTargetConfigProto text, e.g.
h200.txtpb from XLA's xla/backends/gpu/target_config/specs/, https://github.com/openxla/xla),
in ENV: the campaign's JAX, flax and optax with JAX's CUDA plugin (jax-cuda12-plugin,
jax-cuda12-pjrt and the nvidia-* wheels envs/jax-cuda.txt pins: cuDNN compiles cuDNN's
attention). Each distinct cell is estimated once, by the estimator module planning starts
(dlbench.runners.<framework>.memory_estimate); printed beside the tables' peak
(`peak_memory_gib`: PyTorch's reserved, JAX's in use) and the allocator's tensors
(the step log's `device_memory.peak_bytes`).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.steplog import read_steplog  # noqa: E402

COORDS = ("framework", "model", "precision", "data", "batch", "scale", "strategy", "activation_checkpointing")
CAMPAIGN = REPO / "campaigns" / "h200-llama1b-2026-11-28"
DEFAULT_CAMPAIGNS = [CAMPAIGN / part for part in ("pipeline", "memory", "compiled")]


def cells(campaign: Path) -> dict[tuple, list[dict]]:
    """The campaign's finished runs by cell and sequence length."""
    found: dict[tuple, list[dict]] = {}
    with open(campaign / "results" / "tables" / "runs.csv", newline="") as table:
        for row in csv.DictReader(table):
            if row["status"] == "ok" and row["framework"] in ("pytorch", "jax"):
                key = (*(row[name] for name in COORDS), int(float(row["seq_len"])))
                found.setdefault(key, []).append(row)
    return found


def allocated_gib(campaign: Path, row: dict) -> float:
    log = read_steplog(campaign / row["log_files"].split(";")[0])
    return log.footer["device_memory"]["peak_bytes"] / 2**30


def estimate(python: str, key: tuple, target_config: str | None) -> dict:
    coords = dict(zip(COORDS, key[:-1], strict=True))
    coords.update(batch=int(float(coords["batch"])), repeat=1, data="synthetic")
    request = {"coords": coords, "seq_len": key[-1], "device": "cuda"}
    if target_config and coords["framework"] == "jax":
        request["target_config"] = target_config
    module = f"dlbench.runners.{coords['framework']}.memory_estimate"
    done = subprocess.run(
        [python, "-m", module], input=json.dumps([request]), capture_output=True, text=True, cwd=REPO, check=True
    )
    return json.loads(done.stdout)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jax-python", required=True)
    parser.add_argument("--target-config", required=True)
    parser.add_argument("--pytorch-python", default=str(REPO / ".venvs/pytorch/bin/python"))
    parser.add_argument("campaigns", nargs="*", type=Path, default=DEFAULT_CAMPAIGNS)
    args = parser.parse_args()
    python = {"jax": args.jax_python, "pytorch": args.pytorch_python}
    target = str(Path(args.target_config).resolve())
    for campaign in args.campaigns:
        for key, rows in cells(campaign).items():
            start = time.perf_counter()
            result = estimate(python[key[0]], key, target)
            name = f"{campaign.name}: {' '.join(map(str, key))}"
            if "error" in result:
                print(f"{name}: {result['error']}")
                continue
            gib, peak = result["tensors"] / 2**30, max(float(row["peak_memory_gib"]) for row in rows)
            tensors = allocated_gib(campaign, rows[0])
            print(
                f"{name}: estimate {gib:.4f} GiB ({time.perf_counter() - start:.1f} s); tables' peak {peak:.4f} "
                f"({gib / peak - 1:+.2%}), tensors {tensors:.4f} ({gib / tensors - 1:+.2%}); {len(rows)} runs"
            )


if __name__ == "__main__":
    main()
