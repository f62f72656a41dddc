# A working directory through several grids (docs/workdir.md): before anything is planned,
# runs of this grid recorded under other settings are refused by name, and what the tables,
# FLOPs counts and batch searches are made from is written where their rules read it.
from dlbench.planning import asked as dlbench_asked
from dlbench.planning import measured as dlbench_measured

# Jobs that Snakemake runs in their own process (Slurm, --sdm apptainer) plan one job: the
# invocation that submitted them has checked and written all this already.
if not (workflow.remote_exec or workflow.subprocess_exec):
    MEASURED_ELSEWHERE = RECORDED_RUNS[RUN_RECORD] and dlbench_measured.differences(
        (r for r in GRID.runs if r.run_dir in RECORDED_RUNS[RUN_RECORD]),
        dlbench_measured.Asked(config, DEPLOY, GRID.protocol),
    )
    if MEASURED_ELSEWHERE:
        dlbench_measured.write_refused(MEASURED_ELSEWHERE)
        raise WorkflowError(dlbench_measured.refusal(MEASURED_ELSEWHERE))
    dlbench_asked.record(config, RUN_RECORDS, GRID.runs)
