"""OneFlow: declared so that its cells stay in the grids (CAICT 2020, seed 004) as N/A, with why.

No OneFlow build installs for this project's Python (3.11) from the registries reachable here
(docs/frameworks/oneflow.md): PyPI's newest, oneflow 0.9.0, has wheels for CPython 3.7-3.10
only, and its 0.6.0 and 0.7.0 are placeholders whose import raises. When a build exists, this
package becomes a runner like dlbench/runners/paddle/ (flow.nn.Graph as its fast path, DDP).
"""

from __future__ import annotations

from dlbench.models import CATALOGUE
from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.base import Workloads
from dlbench.runners.plugin import Capabilities, Strategy

# Checked 2026-11-23 with `pip index versions oneflow` and `pip download oneflow==0.9.0
# --python-version 3.X --only-binary=:all:` (docs/frameworks/oneflow.md).
UNAVAILABLE = (
    "no OneFlow build installs for Python 3.11: PyPI's oneflow 0.9.0 has CPython 3.7-3.10 wheels only "
    "(manylinux2014 x86_64, a CUDA build), oneflow 0.6.0 and 0.7.0 are placeholders whose import raises, "
    "and OneFlow's own wheel index is not reachable from here"
)

# No workload until a build exists: every model is unavailable.
WORKLOADS = Workloads("oneflow")

CAPABILITIES = Capabilities(
    label="OneFlow",
    colour="#8c564b",
    models=WORKLOADS.models,
    unavailable_models=dict.fromkeys(CATALOGUE, UNAVAILABLE),
    precisions=("fp32", "amp"),
    unavailable_devices={"cuda": UNAVAILABLE},
    strategies=(
        Strategy(
            "ddp",
            "OneFlow DistributedDataParallel: gradients all-reduced every step",
            unavailable=UNAVAILABLE,
        ),
    ),
)


class Runner(BaseRunner):
    def build(self) -> None:
        raise RuntimeError(UNAVAILABLE)
