"""The compilers' memory estimates of a committed GPU campaign's LLM runs, made on this
(GPU-less) host through planning's own path, against the peaks those runs measured on the device.

    python benchmarks/gpu_memory_estimates.py --jax-python ENV/bin/python --target-config SPEC \
        [--pytorch-python .venvs/pytorch/bin/python] [CAMPAIGN ...]

CAMPAIGN: a folder with results/ (default: the three parts of campaigns/h200-llama1b-2026-11-28).
Each distinct cell's shape is made by dlbench.planning.compiled (`request`, `prepare` into a
scratch cache, `lookup`), as `snakemake -n` of a CUDA grid with `run.gpu_target_config: SPEC`
makes it. PyTorch: its estimator (fake tensors under the memory tracker) needs no device. JAX:
XLA's deviceless compile for the device SPEC describes (an XLA GpuTargetConfigProto text, e.g.
h200.txtpb from XLA's xla/backends/gpu/target_config/specs/, https://github.com/openxla/xla),
in ENV: the campaign's JAX, flax and optax with JAX's CUDA plugin (jax-cuda12-plugin,
jax-cuda12-pjrt and the nvidia-* wheels envs/jax-cuda.txt pins: cuDNN compiles cuDNN's
attention). Printed beside the tables' peak (`peak_memory_gib`: PyTorch's reserved, JAX's in
use) and the allocator's tensors (the step log's `device_memory.peak_bytes`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.analysis.columns import read_runs  # noqa: E402
from dlbench.coords import RunCoords  # noqa: E402
from dlbench.planning import compiled  # noqa: E402
from dlbench.steplog import read_steplog  # noqa: E402

CAMPAIGN = REPO / "campaigns" / "h200-llama1b-2026-11-28"
DEFAULT_CAMPAIGNS = [CAMPAIGN / part for part in ("pipeline", "memory", "compiled")]


def measured(campaign: Path) -> dict[tuple, dict]:
    """Per (cell, sequence length) of the campaign's finished runs: the tables' largest peak and
    the first run's allocator tensors, GiB."""
    runs = read_runs(campaign / "results" / "tables" / "runs.csv")
    cells: dict[tuple, dict] = {}
    for row in runs[runs["status"] == "ok"].to_dict("records"):
        key = (RunCoords.from_dict(row).cell, int(row["seq_len"]))
        if key not in cells:
            log = read_steplog(campaign / str(row["log_files"]).split(";")[0])
            cells[key] = {"peak": 0.0, "runs": 0, "tensors": log.footer["device_memory"]["peak_bytes"] / 2**30}
        cells[key]["peak"] = max(cells[key]["peak"], float(row["peak_memory_gib"]))
        cells[key]["runs"] += 1
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jax-python", required=True)
    parser.add_argument("--target-config", required=True)
    parser.add_argument("--pytorch-python", default=str(REPO / ".venvs/pytorch/bin/python"))
    parser.add_argument("campaigns", nargs="*", type=Path, default=DEFAULT_CAMPAIGNS)
    args = parser.parse_args()
    run = {
        "device": "cuda",
        "python": {"jax": args.jax_python, "pytorch": args.pytorch_python},
        "gpu_target_config": str(Path(args.target_config).resolve()),
    }
    target = compiled.target_digest(run)
    for campaign in args.campaigns:
        cells = measured(campaign)
        shapes = [s for s in (compiled.request(c, n, "cuda") for c, n in cells) if s]
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            notes = compiled.prepare(shapes, run, cache)
            print(f"{campaign.name}: {notes[0]} in {time.perf_counter() - start:.1f} s", *notes[1:], sep="\n")
            for (cell, seq_len), seen in cells.items():
                made = compiled.lookup(cell, seq_len, "cuda", cache, target=target)
                if made is None:
                    continue
                print(
                    f"  {cell.label} seq {seq_len}: estimate {made.gib:.4f} GiB; tables' peak {seen['peak']:.4f} "
                    f"({made.gib / seen['peak'] - 1:+.2%}), tensors {seen['tensors']:.4f} "
                    f"({made.gib / seen['tensors'] - 1:+.2%}); {seen['runs']} runs"
                )


if __name__ == "__main__":
    main()
