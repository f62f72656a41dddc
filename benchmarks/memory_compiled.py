"""The compilers' memory estimates (dlbench/planning/compiled.py) and the formula's
(dlbench/planning/fit.py) against the measured peak per rank, cell by cell, from a working
directory's runs.csv (docs/memory.md, "The compilers' estimate"):

    .venvs/analysis/bin/snakemake --profile profiles/local --configfile config/grids/llm_memory_cpu.yaml -d DIR
    .venvs/analysis/bin/python benchmarks/memory_compiled.py DIR [--target 0.10]

Prints one Markdown row per run (MiB; errors as estimate ÷ measured − 1) and the cells
outside ±target.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dlbench.analysis.columns import col, read_runs  # noqa: E402
from dlbench.coords import CellKey  # noqa: E402

MIB_PER_GIB = 1024


def rows(runs) -> list[dict]:
    out = []
    for _, run in runs[runs[col.status] == "ok"].iterrows():
        key = CellKey(*(run[name] for name in CellKey.__dataclass_fields__))
        measured = run[col.peak_memory_gib]
        out.append(
            {
                "cell": f"{key.framework} {key.scale} {key.strategy}{key.training}",
                "formula": run[col.memory_estimate_gib],
                "compiler": run[col.compiled_estimate_gib],
                "measured": measured,
                "formula_error": run[col.memory_estimate_gib] / measured - 1,
                "compiler_error": run[col.compiled_estimate_gib] / measured - 1,
            }
        )
    return sorted(out, key=lambda r: r["cell"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--target", type=float, default=0.10)
    args = parser.parse_args()
    table = rows(read_runs(args.workdir / "results/tables/runs.csv"))
    print("| cell | formula | compiler's | measured | formula error | compiler's error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in table:
        mib = [f"{r[k] * MIB_PER_GIB:.0f}" for k in ("formula", "compiler", "measured")]
        print(f"| {r['cell']} | {' | '.join(mib)} | {r['formula_error']:+.1%} | {r['compiler_error']:+.1%} |")
    outside = [r for r in table if not abs(r["compiler_error"]) <= args.target]
    print(
        f"\n{len(table) - len(outside)} of {len(table)} runs within ±{args.target:.0%}"
        + ("; outside:" if outside else "")
    )
    for r in outside:
        print(f"  {r['cell']}: {r['compiler_error']:+.1%}")


if __name__ == "__main__":
    main()
