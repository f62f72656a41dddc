# Config validation and input functions: the Snakefile and the rule files ask these.
import os

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import RerunTrigger

from dlbench.planning import config as dlbench_config
from dlbench.planning import origins as dlbench_origins
from dlbench.planning import summary as dlbench_summary
from dlbench.planning import jobs as dlbench_jobs
from dlbench.planning import prescreen as dlbench_prescreen
from dlbench.coords import RUN_DIR_TEMPLATE, RUN_RECORD, RUN_RECORD_TEMPLATE
from dlbench.coords import WILDCARD_CONSTRAINTS as CONSTRAINTS
from dlbench.images.apptainer import ContainerError
from dlbench.planning import datasets as data_paths
from dlbench.planning.deployment import Deployment
from dlbench.planning.grid import planned_sizes
from dlbench.planning.snakemake_api import command_param, known_signature

# --config's settings, as Snakemake parsed them (GRID_FILES, CONFIG_FILES: the Snakefile's).
CONFIG_OVERRIDES = dict(workflow.config_settings.config)


def config_origins():
    """Where each setting came from (file:line, --config, preset, schema default); asked only
    for the plan summary and for a problem's message."""
    return dlbench_origins.origins(CONFIG_FILES, CONFIG_OVERRIDES, config)


def planned_record(wildcards=None):
    """What planning knew, as campaign.json keeps it: the departures with their origins, the
    estimated cost (dlbench/planning/summary.py)."""
    return dlbench_summary.planned_record(
        GRID, config, CONFIG_FILES, CONFIG_OVERRIDES, workflow.basedir
    )


try:
    # LLM cells' memory estimates from the compilers: made here, at planning, not in jobs.
    GRID = dlbench_config.checked_grid(
        config,
        config_origins,
        estimate_memory=not (workflow.remote_exec or workflow.subprocess_exec),
    )
except ValueError as error:
    raise WorkflowError(f"invalid config: {error}") from None

# What runs, by which protocol, what departs from the preset and what it costs: before anything
# runs, and a grid over run.max_device_hours is refused. (tools/run.sh's second invocation,
# which bundles the report, has said it already.)
if not (workflow.remote_exec or workflow.subprocess_exec):
    try:
        PLAN = dlbench_summary.before_run(
            GRID, config, config_origins, workflow.basedir
        )
    except ValueError as error:
        raise WorkflowError(f"invalid config: {error}") from None
    if os.environ.get("DLBENCH_PLAN_SUMMARY") != "0":
        logger.info("\n".join(PLAN))
SDM = workflow.deployment_settings.deployment_method
try:
    DEPLOY = Deployment(config, workflow.basedir, SDM, lambda: workflow.rerun_triggers)
except (ValueError, ContainerError) as error:
    raise WorkflowError(str(error)) from None

# Three rules ask for every record: made once.
RUN_RECORDS = tuple(RUN_RECORD_TEMPLATE.format(**run.wildcards()) for run in GRID.runs)
# Run directories by the records they hold: one walk instead of a stat per run.
RECORDED_RUNS = dlbench_jobs.recorded_runs()
REAL_DATA_INPUTS = data_paths.train_data_inputs_function(config)
MAX_BATCH_TEMPLATE = "results/batch_max/{device}/{framework}/{model}/{precision}.json"
ANALYSIS_ENV = "../../envs/analysis.yaml"
REPO, VENVS = workflow.basedir, DEPLOY.venvs
# Input and params functions whose answer depends on the deployment (dlbench/planning/deployment.py).
framework_env, framework_python = DEPLOY.venv_inputs, DEPLOY.venv_python
# The Slurm job shapes of the training rules (train.smk), and the communication prescreen
# (prescreen.smk, docs/slurm.md) measured on them before the timed grid.
try:
    TRAIN_SHAPES = dlbench_jobs.shapes(GRID.runs)
except ValueError as error:
    raise WorkflowError(f"invalid config: grid.strategies: {error}") from None
try:
    PRESCREEN = dlbench_prescreen.plan(config, TRAIN_SHAPES)
except ValueError as error:
    raise WorkflowError(f"invalid config: {error}") from None
PRESCREEN_RECORDS = PRESCREEN.records if PRESCREEN else []
PRESCREEN_MEASURED = [dlbench_prescreen.MEASURED] if PRESCREEN else []


wildcard_constraints:
    **CONSTRAINTS,


def get_final_output():
    """What `snakemake` builds by default: the report and the tables and figures it shows."""
    tables = ["cells.md", "references.csv", "run_order.csv"]
    tables = [f"results/tables/{name}" for name in tables]
    figures = [f"results/figures/{name}.png" for name in ("throughput", "speedup")]
    profiles = ["results/tables/profiles.csv"] if GRID.profiled else []
    return ["results/report/index.html", *tables, *figures, *profiles]


def all_run_records(wildcards=None):
    """Every run's record. Rules that are not always in the DAG (runs, audit) take this
    function, not its list: Snakemake makes a file object per listed path when it parses a
    rule, 10 000 per rule for a large grid, but calls an input function only for a job.
    """
    return RUN_RECORDS


def published_references():
    """The published numbers (a relative path is relative to the repository)."""
    return os.path.join(REPO, config["references"]["published"])


def model_flops_files():
    return [f"results/flops/{model}.json" for model in config["grid"]["models"]]


def threads_per_run():
    return config["run"]["threads"]


def train_command(wildcards):
    """The launcher's command line in the run's environment (dlbench/planning/deployment.py)."""
    max_batch = next(iter(max_batch_result(wildcards)), None)
    return DEPLOY.command(
        wildcards, DEPLOY.launch_arguments(wildcards, GRID.run_protocol, max_batch)
    )


def train_command_param(runs):
    """The training command as the param of these runs' rules (train.smk): a template
    Snakemake fills in where it can (dlbench.planning.snakemake_api.command_param)."""
    return command_param(runs, train_command, planned_sizes_of)


def planned_sizes_of(model):
    return planned_sizes(config["run"], model)


def max_batch_result(wildcards):
    """The batch search a `batch: max` run needs (none for a fixed batch)."""
    if wildcards.batch != "max":
        return []
    return [MAX_BATCH_TEMPLATE.format(**wildcards, device=config["run"]["device"])]


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


def train_inputs(wildcards):
    """A run that already has its record needs nothing (re-analysing an archive of raw
    logs must not build framework environments); otherwise its environment (its verified
    image under --sdm apptainer), the batch search of `batch: max`, its dataset."""
    plan_by_mtime()
    if RUN_DIR_TEMPLATE.format(**wildcards) in RECORDED_RUNS[RUN_RECORD]:
        return []
    inputs = DEPLOY.software_inputs(wildcards)
    inputs += PRESCREEN_MEASURED  # the communication prescreen first
    inputs += max_batch_result(wildcards)
    if wildcards.data == "real":
        inputs += REAL_DATA_INPUTS(wildcards.framework, wildcards.model)
    return inputs
