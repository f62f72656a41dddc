# Config validation and input functions: the Snakefile and the rule files ask these.
import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from dlbench import config as dlbench_config
from dlbench import jobs as dlbench_jobs
from dlbench.coords import RUN_DIR_TEMPLATE, RUN_RECORD, RUN_RECORD_TEMPLATE
from dlbench.coords import WILDCARD_CONSTRAINTS as CONSTRAINTS
from dlbench.containers import ContainerError
from dlbench.data import paths as data_paths
from dlbench.deployment import Deployment

try:
    GRID = dlbench_config.checked_grid(
        config,
        lambda config: validate(config, dlbench_config.CONFIG_SCHEMA, set_default=True),
    )
except ValueError as error:
    raise WorkflowError(f"invalid config: {error}") from None

SDM = workflow.deployment_settings.deployment_method
try:
    DEPLOY = Deployment(config, workflow.basedir, SDM, lambda: workflow.rerun_triggers)
except (ValueError, ContainerError) as error:
    raise WorkflowError(str(error)) from None

# Run directories by the records they hold: one walk instead of a stat per run.
RECORDED_RUNS = dlbench_jobs.recorded_runs()
MAX_BATCH_TEMPLATE = "results/batch_max/{device}/{framework}/{model}/{precision}.json"
ANALYSIS_ENV = "../../envs/analysis.yaml"
REPO, VENVS = workflow.basedir, DEPLOY.venvs
# Input and params functions whose answer depends on the deployment (dlbench/deployment.py).
framework_env, framework_python = DEPLOY.venv_stamp, DEPLOY.venv_python
train_env_lock, real_data_dir = DEPLOY.env_lock, DEPLOY.data_dir
data_workers = DEPLOY.data_workers


wildcard_constraints:
    **CONSTRAINTS,


def get_final_output():
    """What `snakemake` builds by default: the report and the tables and figures it shows."""
    tables = ["results/tables/cells.md", "results/tables/references.csv"]
    figures = [f"results/figures/{name}.png" for name in ("throughput", "speedup")]
    return ["results/report/index.html", *tables, *figures]


def all_run_records():
    return [RUN_RECORD_TEMPLATE.format(**run.as_dict()) for run in GRID.runs]


def published_references():
    """The published numbers (a relative path is relative to the repository)."""
    return os.path.join(REPO, config["references"]["published"])


def model_flops_files():
    return [f"results/flops/{model}.json" for model in config["grid"]["models"]]


def threads_per_run():
    return config["run"]["threads"]


def launch_arguments(wildcards):
    """The launcher's command line (a LaunchRequest); every value has passed the schema's
    strict patterns."""
    import shlex

    from dlbench.coords import RunCoords
    from dlbench.launch.request import LaunchRequest

    run, protocol = config["run"], GRID.protocol
    real = wildcards.data == "real"
    request = LaunchRequest(
        coords=RunCoords.from_dict(dict(wildcards.items())),
        run_dir=RUN_DIR_TEMPLATE.format(**wildcards),
        preset=protocol["preset"],
        warmup_steps=protocol["warmup_steps"],
        measured_steps=protocol["measured_steps"],
        statistic=protocol["statistic"],
        image_size=run["image_size"],
        seq_len=run["seq_len"],
        max_batch_file=next(iter(max_batch_result(wildcards)), None),
        threads=threads_per_run(),
        device=run["device"],
        compile=run["compile"],
        time_limit=run["time_limit_s"],
        progress_every=run["progress_every"],
        memory_cap_mb=run["memory_cap_mb"],
        env_lock=train_env_lock(wildcards),
        launcher=run["launcher"],
        data_dir=real_data_dir(wildcards) if real else "",
        data_workers=data_workers(wildcards) if real else 1,
    )
    return shlex.join(request.to_argv())


def max_batch_result(wildcards):
    """The batch search a `batch: max` run needs (none for a fixed batch)."""
    if wildcards.batch != "max":
        return []
    return [MAX_BATCH_TEMPLATE.format(**wildcards, device=config["run"]["device"])]


def train_inputs(wildcards):
    """A run that already has its record needs nothing (re-analysing an archive of raw
    logs must not build framework environments); otherwise its environment (its verified
    image under --sdm apptainer), the batch search of `batch: max`, its dataset."""
    if RUN_DIR_TEMPLATE.format(**wildcards) in RECORDED_RUNS[RUN_RECORD]:
        return []
    inputs = DEPLOY.software_inputs(wildcards)
    inputs += max_batch_result(wildcards)
    if wildcards.data == "real":
        model = wildcards.model
        inputs += data_paths.train_data_inputs(wildcards.framework, model, config)
    return inputs
