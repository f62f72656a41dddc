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
        f"--env-lock {REPO}/envs/{wildcards.framework}.txt",
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
    return [ancient(framework_env(wildcards)), *max_batch_result(wildcards)]


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
