# Config validation, the grid, and input functions. Everything else asks these.
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, workflow.basedir)

from dlbench import config as dlbench_config  # noqa: E402
from dlbench import grid as dlbench_grid  # noqa: E402
from dlbench.data import paths as data_paths  # noqa: E402
from dlbench.models import CATALOGUE  # noqa: E402
from dlbench.runners import framework_names, processes_per_node  # noqa: E402
from dlbench.coords import (  # noqa: E402
    RUN_DIR_TEMPLATE,
    RUN_FIELDS,
    Scale,
    RUN_RECORD_TEMPLATE,
    WILDCARD_CONSTRAINTS,
)

# One short message naming the key and the bad value first; then Snakemake's own
# validation, which also fills in the schema's defaults.
CONFIG_SCHEMA = workflow.source_path("../schemas/config.schema.yaml")
config_problem = dlbench_config.schema_problem(config, CONFIG_SCHEMA)
if config_problem:
    raise WorkflowError(f"invalid config: {config_problem}")
validate(config, schema="../schemas/config.schema.yaml", set_default=True)
try:
    GRID = dlbench_grid.expand(config)
except (dlbench_grid.ConfigError, ValueError) as error:
    raise WorkflowError(f"invalid config: {error}") from None

KNOWN_FRAMEWORKS = framework_names()
MAX_BATCH_TEMPLATE = "results/batch_max/{device}/{framework}/{model}/{precision}.json"
ANALYSIS_ENV = "../../envs/analysis.yaml"
REPO = workflow.basedir
# Framework environments live with the code, not the working directory, so that several
# working directories (tests, archives being re-analysed) share them.
VENVS = os.environ.get("DLBENCH_VENVS", os.path.join(REPO, ".venvs"))


wildcard_constraints:
    **WILDCARD_CONSTRAINTS,


def all_run_records():
    return [RUN_RECORD_TEMPLATE.format(**run.as_dict()) for run in GRID.runs]


def published_references():
    """The published numbers (a relative path is relative to the repository)."""
    return os.path.join(REPO, config["references"]["published"])


def model_flops_files():
    return [f"results/flops/{model}.json" for model in config["grid"]["models"]]


def framework_env(wildcards):
    return os.path.join(VENVS, wildcards.framework, ".dlbench-env")


def framework_envs():
    """Every known framework's environment (the test suite needs them all)."""
    return [os.path.join(VENVS, name, ".dlbench-env") for name in KNOWN_FRAMEWORKS]


def framework_python(wildcards):
    return os.path.join(VENVS, wildcards.framework, "bin", "python")


def threads_per_run():
    return config["run"]["threads"]


def launch_arguments(wildcards):
    """The launcher's command line; every value has passed the schema's strict patterns."""
    run, protocol = config["run"], GRID.protocol
    args = [f"--{name} {value}" for name, value in wildcards.items()]
    args += [
        f"--run-dir {RUN_DIR_TEMPLATE.format(**wildcards)}",
        f"--preset {protocol['preset']}",
        f"--warmup-steps {protocol['warmup_steps']}",
        f"--measured-steps {protocol['measured_steps']}",
        f"--statistic {protocol['statistic']}",
        f"--image-size {run['image_size']}",
        f"--seq-len {run['seq_len']}",
        f"--device {run['device']}",
        f"--time-limit {run['time_limit_s']}",
        f"--progress-every {run['progress_every']}",
        f"--memory-cap-mb {run['memory_cap_mb']}",
        f"--launcher {run['launcher']}",
        f"--env-lock {train_env_lock(wildcards)}",
    ]
    if run["compile"]:
        args.append("--compile")
    args += [f"--max-batch-file {path}" for path in max_batch_result(wildcards)]
    if wildcards.data == "real":
        args.append(f"--data-dir {real_data_dir(wildcards)}")
        args.append(f"--data-workers {data_workers(wildcards)}")
    return " ".join(args)


def data_workers(wildcards):
    """Input-pipeline workers per rank: config, else the rank's share of the run's CPUs."""
    if config["run"]["data_workers"]:
        return config["run"]["data_workers"]
    per_node = Scale.parse(wildcards.scale).devices_per_node
    processes = processes_per_node(wildcards.framework, wildcards.strategy, per_node)
    return max(1, config["run"]["threads"] // processes)


def real_data_dir(wildcards):
    """The framework's converted dataset a real-data run reads (data.smk builds it)."""
    kind = CATALOGUE[wildcards.model]["kind"]
    return data_paths.dataset_path(wildcards.framework, kind, config)


def max_batch_result(wildcards):
    """The batch search a `batch: max` run needs (none for a fixed batch)."""
    if wildcards.batch != "max":
        return []
    return [
        MAX_BATCH_TEMPLATE.format(
            device=config["run"]["device"],
            framework=wildcards.framework,
            model=wildcards.model,
            precision=wildcards.precision,
        )
    ]


def train_inputs(wildcards):
    """A run that already has its record needs nothing (re-analysing an archive of raw
    logs must not build framework environments); otherwise its environment and, for
    `batch: max`, the batch search."""
    if os.path.exists(RUN_RECORD_TEMPLATE.format(**wildcards)):
        return []
    # --sdm apptainer: the framework's verified image (containers.smk) instead of its venv
    software = (
        image_inputs(wildcards)
        if USE_APPTAINER
        else [ancient(framework_env(wildcards))]
    )
    data = (
        data_paths.train_data_inputs(wildcards.framework, wildcards.model, config)
        if wildcards.data == "real"
        else []
    )
    return [*software, *max_batch_result(wildcards), *data]


# Training jobs: one rule per job shape (train.smk), each with static Slurm resources.
from dlbench import jobs as dlbench_jobs  # noqa: E402
from dlbench.slurm import RECORD as SLURM_RECORD  # noqa: E402

try:
    TRAIN_SHAPES = dlbench_jobs.shapes(GRID.runs)
except ValueError as error:
    raise WorkflowError(f"invalid config: grid.strategies: {error}") from None


def ended_runs():
    """Wildcard constraints that match (at least) the runs an earlier invocation's Slurm job
    left without launch.json, or None. Only srun-launched runs leave slurm.json."""
    if config["run"]["launcher"] != "srun":
        return None
    ended = [
        run
        for run in GRID.runs
        if os.path.exists(os.path.join(run.run_dir, SLURM_RECORD))
        and not os.path.exists(os.path.join(run.run_dir, "launch.json"))
    ]
    if not ended:
        return None
    return {
        name: dlbench_jobs.constraint(
            sorted({str(getattr(run, name)) for run in ended})
        )
        for name in RUN_FIELDS
    }


ENDED_RUNS = ended_runs()
TRAIN_LOG = "logs/runs/{framework}/{model}/{precision}/{data}/bs{batch}/{scale}/{strategy}/rep{repeat}.log"


def train_command(wildcards):
    """The launcher's command line in the framework's environment (or image)."""
    return (
        f"{train_environment(wildcards)} PYTHONPATH={train_pythonpath(wildcards)} "
        f"{train_python(wildcards)} -m dlbench.launch {launch_arguments(wildcards)} "
        f"--threads {threads_per_run()}"
    )


def snakemake_attempt(wildcards, attempt):
    return attempt


# ---- Apptainer images (rules in containers.smk; docs/containers.md) ----
from snakemake.settings.types import DeploymentMethod

from dlbench import containers as dlbench_containers  # noqa: E402
from dlbench import provenance as dlbench_provenance  # noqa: E402

USE_APPTAINER = (
    DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method
)
IMAGES_LOCK = os.path.abspath(
    os.environ.get(
        "DLBENCH_IMAGES_LOCK", os.path.join(REPO, "containers", "images.lock")
    )
)
if USE_APPTAINER and config["run"]["launcher"] == "srun":
    # Snakemake runs the whole job command in the image: srun is not there and --cleanenv
    # drops SLURM_*. Multi-node runs need the ranks, not the launcher, in the image.
    raise WorkflowError(
        "run.launcher: srun does not work inside an Apptainer image yet (docs/containers.md, "
        "Known gaps): use launcher: local (one node) with --sdm apptainer, or the venvs"
    )
try:
    IMAGE_PINS = dlbench_containers.load_lock(IMAGES_LOCK)
except dlbench_containers.ContainerError as error:
    raise WorkflowError(str(error)) from None
# Built images are large: keep them where the cluster keeps such things.
IMAGES_DIR = os.path.abspath(
    os.environ.get("DLBENCH_IMAGES", os.path.join(REPO, "containers"))
)
IMAGE_FILE = os.path.join(IMAGES_DIR, "{framework}.sif")
# What verify_image checked; the training job's step-log header takes the image digest from it.
IMAGE_RECORD = "results/containers/{framework}.image.json"
# Where the images' recipes put dlbench's code and the framework's env lock.
IMAGE_DLBENCH = dlbench_containers.IMAGE_CODE_DIR
# The resolved config (defaults filled in), hashed into every run's header.
CONFIG_SHA256 = dlbench_provenance.config_sha256(config)


def _pinned(framework):
    if framework not in IMAGE_PINS:
        raise WorkflowError(
            f"containers/images.lock has no [{framework}] image (known: {', '.join(IMAGE_PINS)})"
        )
    return framework


def framework_image(wildcards):
    return IMAGE_FILE.format(framework=_pinned(wildcards.framework))


def framework_container(wildcards):
    """The training rule's `container:` (None, so no image is even named, without --sdm apptainer)."""
    return framework_image(wildcards) if USE_APPTAINER else None


def image_inputs(wildcards):
    """A training job's image and verification record under --sdm apptainer; nothing otherwise.

    Listed as inputs so that `snakemake -n --sdm apptainer` shows each job's image, and so that
    no job starts before its image has been verified.
    """
    if not USE_APPTAINER:
        return []
    return [
        ancient(framework_image(wildcards)),
        ancient(IMAGE_RECORD.format(framework=wildcards.framework)),
    ]


USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method


def train_python(wildcards):
    """The image's or the conda env's python (--sdm apptainer / conda), else the venv's."""
    if USE_APPTAINER:
        return "python3"
    return "python" if USE_CONDA else framework_python(wildcards)


def train_pythonpath(wildcards):
    return IMAGE_DLBENCH if USE_APPTAINER else REPO


def train_env_lock(wildcards):
    """The env lock to hash into the header: the image's copy inside a container."""
    root = IMAGE_DLBENCH if USE_APPTAINER else REPO
    return os.path.join(root, "envs", f"{wildcards.framework}.txt")


def train_environment(wildcards):
    """Variables for the training command (set in the command: --cleanenv drops the host's)."""
    values = {"DLBENCH_CONFIG_SHA256": CONFIG_SHA256}
    if USE_APPTAINER:
        values["DLBENCH_IMAGE_RECORD"] = os.path.abspath(
            IMAGE_RECORD.format(framework=wildcards.framework)
        )
    return " ".join(f"{k}={v}" for k, v in values.items())


def grid_images():
    return [
        IMAGE_RECORD.format(framework=fw)
        for fw in sorted({run.framework for run in GRID.runs})
    ]
