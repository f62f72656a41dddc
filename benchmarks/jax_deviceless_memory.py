"""XLA's deviceless memory estimate of a committed GPU campaign's JAX LLM runs, made on this
(GPU-less) host, against the peaks those runs measured on the device.

    python benchmarks/jax_deviceless_memory.py --python ENV/bin/python --target-config SPEC \
        [--campaign campaigns/h200-llama1b-2026-11-28/pipeline]

ENV: an environment with the campaign's JAX, flax and optax and JAX's CUDA plugin
(jax-cuda12-plugin, jax-cuda12-pjrt, and the nvidia-* wheels envs/jax-cuda.txt pins: cuDNN is
needed to compile cuDNN's attention). SPEC: the device's XLA GpuTargetConfigProto text, e.g.
h200.txtpb from XLA's xla/backends/gpu/target_config/specs/ (https://github.com/openxla/xla).
Each distinct JAX cell is compiled once by dlbench.runners.jax.memory_estimate, as planning
starts it; prints the estimate, the measured peak (the tables' `peak_memory_gib`: JAX's
`peak_bytes_in_use`) and the error.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COORDS = ("framework", "model", "precision", "data", "batch", "scale", "strategy", "repeat")


def jax_cells(campaign: Path) -> dict[tuple, dict]:
    """The campaign's JAX runs by cell (their coordinates but the repeat): one row each, its
    measured peaks."""
    cells: dict[tuple, dict] = {}
    with open(campaign / "results" / "tables" / "runs.csv", newline="") as table:
        for row in csv.DictReader(table):
            if row["framework"] == "jax" and row["status"] == "ok":
                key = tuple(row[name] for name in COORDS[:-1]) + (row["seq_len"],)
                cells.setdefault(key, {**row, "peaks": []})["peaks"].append(float(row["peak_memory_gib"]))
    return cells


def estimate(python: str, row: dict, target_config: str) -> dict:
    coords = {name: row[name] for name in COORDS}
    coords.update(batch=int(float(coords["batch"])), repeat=1, data="synthetic")
    request = {
        "coords": coords,
        "seq_len": int(float(row["seq_len"])),
        "device": "cuda",
        "target_config": target_config,
    }
    done = subprocess.run(
        [python, "-m", "dlbench.runners.jax.memory_estimate"],
        input=json.dumps([request]),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    return json.loads(done.stdout)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True)
    parser.add_argument("--target-config", required=True)
    parser.add_argument("--campaign", default=str(REPO / "campaigns/h200-llama1b-2026-11-28/pipeline"))
    args = parser.parse_args()
    for key, row in jax_cells(Path(args.campaign)).items():
        start = time.perf_counter()
        result = estimate(args.python, row, str(Path(args.target_config).resolve()))
        seconds = time.perf_counter() - start
        if "error" in result:
            print(f"{' '.join(key)}: {result['error']}")
            continue
        gib, measured = result["tensors"] / 2**30, max(row["peaks"])
        parts = ", ".join(f"{name} {value / 2**30:.3f}" for name, value in result["xla"].items())
        print(
            f"{' '.join(key)}: estimate {gib:.4f} GiB ({parts}; {seconds:.1f} s), "
            f"measured {measured:.4f} GiB over {len(row['peaks'])} runs, error {gib / measured - 1:+.3%}"
        )


if __name__ == "__main__":
    main()
