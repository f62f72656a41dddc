# One job per run: the launcher starts one process per device in the framework's
# environment; each rank writes its raw step log next to launch.json.
from dlbench.planning import deployment as dlbench_deployment
from dlbench.planning import placement as dlbench_placement
from dlbench.planning import run_order as dlbench_run_order
from dlbench.planning import packing as dlbench_packing
from dlbench.coords import RUN_LOG_TEMPLATE, Scale
from dlbench.launch.slurm import RECORD as SLURM_RECORD

# sbatch's settings that the Slurm plugin cannot pass (run.exclusive's --mem=0; jobs.py).
os.environ.update(dlbench_jobs.submit_environment(config["run"]))
# Runs start interleaved across cells in a seeded order (dlbench/planning/run_order.py).
RUN_ORDER = (config["run"]["order"], config["run"]["order_seed"])
RUN_PRIORITY = known_signature(
    dlbench_run_order.priority_function(GRID.runs, *RUN_ORDER)
)
# slurm.runs_per_job > 1: runs of a shape packed, one after another, into one Slurm job
# (dlbench/planning/packing.py); planned here, looked up per job.
RUNS_PER_JOB = dlbench_packing.runs_per_job(config)
PACKING = (
    dlbench_packing.Packing(
        dlbench_packing.groups(
            GRID.runs,
            dlbench_packing.shape_namer(
                lambda run: dlbench_jobs.job_shape(run).rule_name
            ),
            RUNS_PER_JOB,
            *RUN_ORDER,
        )
    )
    if RUNS_PER_JOB > 1
    else None
)


TRAIN_INPUTS = known_signature(
    PACKING.inputs_function(train_inputs, RECORDED_RUNS[RUN_RECORD], ancient)
    if PACKING
    else train_inputs
)
TRAIN_GROUP = known_signature(PACKING.group_function()) if PACKING else None
TRAIN_SHELL = "{params.command} > {log} 2>&1"
if PACKING:
    TRAIN_SHELL = dlbench_packing.keep_record_shell("{output.record}", TRAIN_SHELL)


# The srun step of each framework and scale, as its launcher will start it (`snakemake -n` shows it).
if config["run"]["launcher"] == "srun":
    for line in DEPLOY.srun_lines(GRID.runs, GRID.run_protocol):
        logger.info(f"srun step: {line}")
# Runs an earlier invocation's Slurm job ended without launch.json (record_ended_run). The
# controller alone decides it: inside a job (a packed group's own Snakemake), a run of the
# group that has started holds slurm.json and no launch.json yet, and is no ended run.
ENDED_RUNS = (
    dlbench_jobs.ended_run_constraints(GRID.runs, RECORDED_RUNS)
    if config["run"]["launcher"] == "srun"
    and not (workflow.remote_exec or workflow.subprocess_exec)
    else None
)


rule find_max_batch:
    input:
        env=framework_env,
        asked=dlbench_asked.BATCH_SEARCH_TEMPLATE,
    output:
        MAX_BATCH_TEMPLATE,
    log:
        "logs/batch_max/{device}/{framework}/{model}/{precision}.log",
    conda:
        ANALYSIS_ENV
    threads: threads_per_run()
    # Submitted as a 1-device run is (one GPU on CUDA), so its probes run where the runs will.
    resources:
        **dlbench_jobs.JobShape("1x1", 1).resources(config["run"]),
    params:
        python=framework_python,
        repo=REPO,
    script:
        "../scripts/find_max_batch.py"


# One rule per job shape (scale × processes per node; dlbench/planning/jobs.py), named train_<scale>
# or train_<scale>_p<processes per node>: each has static Slurm resources, so a large grid's
# DAG needs no resource function per job. Per-rule settings: --set-resources train_2x4:...
for shape, strategies in TRAIN_SHAPES.items():
    shape_runs = [
        r for r in GRID.runs if r.scale == shape.scale and r.strategy in strategies
    ]

    rule:
        name:
            shape.rule_name
        input:
            TRAIN_INPUTS,
        output:
            record=protected(RUN_RECORD_TEMPLATE),
        log:
            RUN_LOG_TEMPLATE,
        wildcard_constraints:
            scale=dlbench_jobs.constraint([shape.scale]),
            strategy=dlbench_jobs.constraint(strategies),
        priority: RUN_PRIORITY
        group:
            TRAIN_GROUP
        conda:
            dlbench_deployment.conda_file(shape_runs, config["run"]["device"])
        # The framework's pinned image under --sdm apptainer (containers.smk).
        container:
            DEPLOY.container if DEPLOY.apptainer else None
        threads: threads_per_run()
        resources:
            # run.spread_nodes: slurm_extra pins each repeat to other nodes (placement.py).
            **dlbench_placement.spread_resources(
                shape.resources(config["run"]),
                Scale.parse(shape.scale).nodes,
                config["run"]["spread_nodes"],
            ),
            **(dlbench_packing.STATIC_RESOURCES if PACKING else {}),
        params:
            command=train_command_param(shape_runs),
        shell:
            TRAIN_SHELL


# The planned order, recorded beside the tables (the step logs' start times say what happened).
rule run_order:
    input:
        dlbench_asked.TABLES,
    output:
        "results/tables/run_order.csv",
    log:
        "logs/run_order.log",
    localrule: True
    params:
        order=RUN_ORDER,
    run:
        with open(output[0], "w") as out:
            out.write(dlbench_run_order.order_csv(GRID.runs, *RUN_ORDER))


# A run whose Slurm job ended (scancel, time limit, node failure) in an earlier invocation,
# before its launcher wrote launch.json, is recorded as Slurm ended it by a local job, not
# run again in a full-size allocation. Snakemake's own --retries within one invocation do
# run it again (dlbench.launch.slurm.previous_attempt). Defined only when there are such runs.
ENDED_RUN_SHELL = "DLBENCH_EARLIER_ATTEMPT=settle {params.command} > {log} 2>&1"
if ENDED_RUNS:

    rule record_ended_run:
        input:
            os.path.join(RUN_DIR_TEMPLATE, SLURM_RECORD),
        output:
            record=protected(RUN_RECORD_TEMPLATE),
        log:
            RUN_LOG_TEMPLATE,
        wildcard_constraints:
            **ENDED_RUNS,
        localrule: True
        conda:
            dlbench_deployment.conda_file(GRID.runs, config["run"]["device"])
        params:
            command=train_command,
        # A packed run whose record its failed job kept is put back, not settled.
        shell:
            (
                dlbench_packing.keep_record_shell("{output.record}", ENDED_RUN_SHELL)
                if PACKING
                else ENDED_RUN_SHELL
            )

    for shape in TRAIN_SHAPES:
        workflow.ruleorder("record_ended_run", shape.rule_name)
