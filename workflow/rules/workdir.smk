# A working directory through several grids (docs/workdir.md): before anything is planned,
# runs of this grid recorded under other settings are refused by name, and what the tables,
# FLOPs counts and batch searches are made from is written where their rules read it.
from snakemake.settings.types import RerunTrigger

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


CHECKED_TRIGGERS = set()


def plan_by_mtime():
    """A recorded run is raw evidence and is never run again, so the workflow is planned by
    mtime alone, as the profiles say: Snakemake's default (every trigger) re-plans a recorded
    run whenever its command changed with the config's hash. Called by the training jobs'
    input function (the settings exist only once the DAG is being built, before any job's
    need is decided); an explicit --rerun-triggers other than all of them is kept."""
    settings = workflow.dag_settings
    # Once per DAG, not per job; there are no settings outside one.
    if settings is None or id(settings) in CHECKED_TRIGGERS:
        return
    CHECKED_TRIGGERS.add(id(settings))
    if set(settings.rerun_triggers) == set(RerunTrigger.all()):
        settings.rerun_triggers = frozenset({RerunTrigger.MTIME})
        logger.info("rerun triggers: mtime, as the profiles set (docs/workdir.md)")
