# The communication prescreen (docs/slurm.md): before the timed grid, per multi-rank
# allocation shape, one short all-reduce through the same launcher and srun as the runs;
# every training job not yet recorded waits for it (train_inputs). PRESCREEN: common.smk.
from dlbench.planning import prescreen as dlbench_prescreen
from dlbench.planning.snakemake_api import RunWildcards


def prescreen_command(shape):
    """The launcher's command line for one shape's measurement (a LaunchRequest)."""
    wildcards = RunWildcards(PRESCREEN.wildcards(shape))
    base = DEPLOY.launch_request(wildcards, GRID.run_protocol, None)
    request = PRESCREEN.request(base, shape, config["prescreen"])
    return DEPLOY.command(wildcards, dlbench_deployment.quoted(request))


def prescreen_inputs(shape):
    """The input function of a shape's rule: the measuring framework's environment or image."""
    return lambda wildcards: DEPLOY.software_inputs(
        RunWildcards(PRESCREEN.wildcards(shape))
    )


for shape in PRESCREEN.shapes if PRESCREEN else ():

    rule:
        name:
            f"prescreen_{shape.scale}"
        input:
            prescreen_inputs(shape),
        output:
            record=protected(
                dlbench_prescreen.PRESCREEN_RECORD.format(scale=shape.scale)
            ),
        log:
            dlbench_prescreen.PRESCREEN_LOG.format(scale=shape.scale),
        threads: threads_per_run()
        resources:
            **shape.resources(config["run"]),
        params:
            command=prescreen_command(shape),
        shell:
            "{params.command} > {log} 2>&1"
