# Adaptive repeats (protocol.repeats: auto; dlbench/analysis/adaptive.py): after a cell's n-th repeat
# a checkpoint decides whether it needs another; aggregate and audit take every cell's runs
# up to the decision that stopped it. Fixed repeats: nothing here is in the DAG.
from snakemake.exceptions import IncompleteCheckpointException

from dlbench.analysis import adaptive as dlbench_adaptive
from dlbench.coords import CellKey

ADAPTIVE = GRID.protocol["repeats"] == "auto"
ADAPTIVE_CELLS = tuple(dict.fromkeys(run.cell for run in GRID.runs)) if ADAPTIVE else ()


def cell_records(cell, n):
    """The records of a cell's repeats 1..n (`cell`: a CellKey)."""
    return [
        RUN_RECORD_TEMPLATE.format(**cell.wildcards(), repeat=r)
        for r in range(1, n + 1)
    ]


def adaptive_records(wildcards=None):
    """Per cell: the runs its decisions asked for so far, and the decision it waits for.
    An undecided cell names its decision file instead of raising, so that every cell's
    runs are scheduled at once; Snakemake re-evaluates this when a decision is made."""
    inputs = []
    for cell in ADAPTIVE_CELLS:
        n = GRID.protocol["adaptive"]["min_repeats"]
        while True:
            try:
                decided = checkpoints.repeat_decision.get(**cell.wildcards(), n=n)
            except IncompleteCheckpointException:
                inputs.append(dlbench_adaptive.decision_path(cell, n))
                break
            if not dlbench_adaptive.read(decided.output[0])["more"]:
                break
            n += 1
        inputs += cell_records(cell, n)
    return inputs


checkpoint repeat_decision:
    input:
        records=lambda wildcards: cell_records(
            CellKey.from_wildcards(wildcards), int(wildcards.n)
        ),
    output:
        dlbench_adaptive.DECISION_TEMPLATE,
    log:
        "logs/repeats/{framework}/{model}/{precision}/{data}/bs{batch}/{scale}/{strategy}{training}/after{n}.log",
    wildcard_constraints:
        n=r"\d+",
    localrule: True
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/repeat_decision.py"
