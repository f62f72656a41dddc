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
ANALYSIS_ENV = "../../envs/analysis.yaml"
REPO = workflow.basedir
# Framework environments live with the code, not the working directory, so that several
# working directories (tests, archives being re-analysed) share them.
VENVS = os.environ.get("DLBENCH_VENVS", os.path.join(REPO, ".venvs"))


wildcard_constraints:
    **WILDCARD_CONSTRAINTS,


def all_run_records():
    return [RUN_RECORD_TEMPLATE.format(**run.as_dict()) for run in GRID.runs]


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
        f"--launcher {run['launcher']}",
        f"--env-lock {REPO}/envs/{wildcards.framework}.txt",
    ]
    if run["compile"]:
        args.append("--compile")
    return " ".join(args)
