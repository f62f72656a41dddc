# Config validation, the grid, and input functions. Everything else asks these.
import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, workflow.basedir)

from dlbench import config as dlbench_config  # noqa: E402
from dlbench import grid as dlbench_grid  # noqa: E402
from dlbench.runners import framework_names  # noqa: E402
from dlbench.coords import (  # noqa: E402
    RUN_DIR_TEMPLATE,
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
    return " ".join(args)


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
    return [*software, *max_batch_result(wildcards)]


# Slurm resources of rule `train`, from the run's scale (snakemake-executor-plugin-slurm's
# keys). One run = one job: `nodes` nodes, one task per device placed by
# `--ntasks-per-node`, `gpu` (single device) or `--gpus-per-node` (several) on CUDA.
# Executors other than slurm ignore them. The first attempt at a run that Slurm ended in
# an earlier invocation only records it (dlbench.slurm.previous_attempt): 1 task, no GPU.
from dlbench import slurm as dlbench_slurm  # noqa: E402
from dlbench.coords import Scale  # noqa: E402


def _settling(wildcards, attempt):
    return (
        config["run"]["launcher"] == "srun"
        and attempt == 1
        and dlbench_slurm.unsettled(RUN_DIR_TEMPLATE.format(**wildcards))
    )


def _multi_task(wildcards, attempt):
    return Scale.parse(wildcards.scale).devices > 1 and not _settling(
        wildcards, attempt
    )


def slurm_nodes(wildcards, attempt):
    return 1 if _settling(wildcards, attempt) else Scale.parse(wildcards.scale).nodes


def slurm_tasks(wildcards, attempt):
    return 1 if _settling(wildcards, attempt) else Scale.parse(wildcards.scale).devices


def slurm_cpus_per_task(wildcards, attempt):
    if _settling(wildcards, attempt):
        return 1
    return dlbench_slurm.cpus_per_task(
        config["run"]["threads"], Scale.parse(wildcards.scale).devices_per_node
    )


def slurm_mem_mb(wildcards, attempt):
    """Memory per node (Slurm's --mem)."""
    return 500 if _settling(wildcards, attempt) else config["run"]["mem_mb"]


def slurm_runtime(wildcards, attempt):
    """Minutes: dlbench's own time limit plus a margin, so that it fires first."""
    return (
        5
        if _settling(wildcards, attempt)
        else dlbench_slurm.runtime_minutes(config["run"]["time_limit_s"])
    )


def slurm_gpu(wildcards, attempt):
    """`gpu` (→ --gpus) for a single-device CUDA run; several devices use --gpus-per-node."""
    if config["run"]["device"] != "cuda" or _settling(wildcards, attempt):
        return None
    return 1 if Scale.parse(wildcards.scale).devices == 1 else None


def slurm_mpi(wildcards, attempt):
    """Marks a multi-task job: the plugin does not wrap it in `srun -n1`; the launcher
    runs srun itself (None: the key is absent, a single-task job)."""
    return "srun" if _multi_task(wildcards, attempt) else None


def slurm_extra(wildcards, attempt):
    """Task placement the plugin has no key for (--ntasks-per-gpu clashes with it)."""
    if not _multi_task(wildcards, attempt):
        return None
    per_node = Scale.parse(wildcards.scale).devices_per_node
    extra = f"--ntasks-per-node={per_node}"
    if config["run"]["device"] == "cuda":
        extra += f" --gpus-per-node={per_node}"
    return extra


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


def train_python(wildcards):
    return "python3" if USE_APPTAINER else framework_python(wildcards)


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
