"""Where a profiled GPU step goes: the device kernels of a Chrome trace (torch.profiler's
`trace.json`, jax.profiler's `*.trace.json.gz`), summed per class of operation and divided by
the profiled steps, beside the step's wall time (docs/gpu.md, "Where the step goes"):

    python benchmarks/gpu_kernel_breakdown.py RUN_DIR [--steps 5] [--json out.json]

RUN_DIR is a profiled run's directory (repeat 0, config `profile`); the number of steps is
read from its step log's footer where there is one. The trace and its kernels are read as
the report reads them (dlbench.analysis.profiles); a kernel's class comes from its name
(CLASSES, first match). Idle is the profiled window less the union of the kernels'
intervals: time the GPU ran nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dlbench.analysis.profiles import device_kernels, load_events, trace_file  # noqa: E402

# (class, pattern on the lower-cased kernel name), first match wins.
CLASSES = (
    ("attention", r"flash|fmha|attention|sdpa|cudnn_generated_fort_native_sdpa|fprop_.*_sdpa|mha"),
    ("matmul", r"gemm|xmma|cutlass|nvjet|sm90_|sm80_|cublas|matmul|\bdot\b|triton_mm|_mm_"),
    ("optimizer", r"multi_tensor|adam|foreach|triton_for_"),  # triton_for_: a compiled foreach update
    ("loss (softmax, cross-entropy)", r"softmax|log_softmax|nll|cross_entropy|logsumexp"),
    ("copies and casts", r"memcpy|memset|copy|convert|_to_copy|cast"),
    ("normalisation", r"rms|norm"),
    ("elementwise and fused", r"elementwise|vectorized|triton_|fusion|loop_|reduce|unrolled|kernel"),
)


def classify(name: str) -> str:
    lowered = name.lower()
    for label, pattern in CLASSES:
        if re.search(pattern, lowered):
            return label
    return "other"


def busy_us(spans: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals."""
    total, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def breakdown(events: list[dict], steps: int) -> dict:
    found = device_kernels(events)
    if not found:
        return {"steps": steps, "kernels": 0}
    spans = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in found]
    window = max(end for _, end in spans) - min(start for start, _ in spans)
    by_class: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    for e in found:
        by_class[classify(e["name"])] += float(e["dur"])
        by_name[e["name"]] += float(e["dur"])
    busy = busy_us(spans)
    per_step = 1e3 * steps  # microseconds summed over `steps` steps -> milliseconds a step
    return {
        "steps": steps,
        "kernels": len(found),
        "window_ms_per_step": window / per_step,
        "busy_ms_per_step": busy / per_step,
        "idle_ms_per_step": (window - busy) / per_step,
        "classes_ms_per_step": {k: v / per_step for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])},
        "top_kernels_ms_per_step": {
            k[:120]: v / per_step for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])[:15]
        },
    }


def profile_record(run_dir: Path) -> dict:
    """Rank 0's footer `profile` (its steps and trace directory), {} where there is none."""
    log = run_dir / "rank0.steps.jsonl"
    return (json.loads(log.read_text().splitlines()[-1]).get("profile") or {}) if log.exists() else {}


def table(result: dict, title: str) -> str:
    if not result.get("kernels"):
        return f"== {title}: no device kernels in the trace"
    window = result["window_ms_per_step"]
    lines = [
        f"== {title}: {result['kernels']} kernels over {result['steps']} steps",
        f"  window {window:.1f} ms/step: kernels busy {result['busy_ms_per_step']:.1f}, "
        f"GPU idle {result['idle_ms_per_step']:.1f} ({result['idle_ms_per_step'] / window:.1%})",
    ]
    for label, ms in result["classes_ms_per_step"].items():
        lines.append(f"  {label:32s} {ms:8.2f} ms/step {ms / window:6.1%}")
    lines.append("  top kernels:")
    for name, ms in result["top_kernels_ms_per_step"].items():
        lines.append(f"    {ms:8.2f} ms/step  {name}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--steps", type=int, default=5, help="profiled steps where the step log names none")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    results = {}
    for run_dir in args.run_dirs:
        record = profile_record(run_dir)
        trace = trace_file(run_dir / record.get("directory", "profile/rank0"))
        if trace is None:
            sys.exit(f"gpu_kernel_breakdown: no trace below {run_dir}")
        result = breakdown(load_events(trace), int(record.get("steps") or args.steps))
        results[str(run_dir)] = result | {"trace": str(trace)}
        print(table(result, str(run_dir)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
