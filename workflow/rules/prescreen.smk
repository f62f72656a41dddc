# The communication prescreen (docs/slurm.md): before the timed grid, per multi-rank
# allocation shape, one short all-reduce through the same launcher and srun as the runs;
# every training job not yet recorded waits for them all (train_inputs). PRESCREEN: common.smk.
for shape in PRESCREEN.shapes if PRESCREEN else ():

    rule:
        name:
            f"prescreen_{shape.scale}"
        input:
            PRESCREEN.software_inputs(DEPLOY, shape),
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
            command=PRESCREEN.command(
                DEPLOY, GRID.run_protocol, shape, config["prescreen"]
            ),
        shell:
            "{params.command} > {log} 2>&1"


# Every shape measured: the one file a training job not yet recorded waits for.
if PRESCREEN:

    rule prescreened:
        input:
            PRESCREEN_RECORDS,
        output:
            PRESCREEN_MEASURED,
        log:
            "logs/prescreen/measured.log",
        localrule: True
        run:
            dlbench_prescreen.write_measured(input, output[0])
