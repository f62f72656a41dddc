# dlbench: the experiment grid in config/ becomes one training job per run, then tables,
# figures and the report. Usage: README.md. Rules that run where snakemake runs, also under
# a cluster executor (profiles/slurm), say `localrule: True`: the environments need the
# network, the analysis takes seconds. Training runs and batch searches are submitted.

import os
import sys

from snakemake.exceptions import WorkflowError

from dlbench.planning import config as dlbench_config
from dlbench.planning import dag as planning
from dlbench.planning import workdir_owner

# No garbage collection while the grid is planned; it resumes when the run starts (planning/dag.py).
planning.pause_collection()

# A grid file is the whole experiment (dlbench/planning/origins.py): with --configfile, nothing
# lies under it; without, the working directory's config/config.yaml, else the embedded default
# beside this Snakefile (`--directory DIR` in a fresh directory runs the same grid).
GRID_FILES = [str(path) for path in workflow.config_settings.configfiles]
CONFIG_FILES = dlbench_config.origins.config_files(GRID_FILES)
if not GRID_FILES:
    # Snakemake's own message for a config file that does not parse names neither file nor line.
    CONFIGFILE_PROBLEM = dlbench_config.config_file_problem(CONFIG_FILES[0])
    if CONFIGFILE_PROBLEM:
        raise WorkflowError(f"invalid config file: {CONFIGFILE_PROBLEM}")

    configfile: CONFIG_FILES[0]


# Snakemake's lock message does not say who holds the directory: say it first.
if not (workflow.remote_exec or workflow.subprocess_exec) and (
    HOLDER := workdir_owner.holder()
):
    print(HOLDER, file=sys.stderr)


onstart:
    planning.resume_collection()
    workdir_owner.claim()


onsuccess:
    workdir_owner.release()


onerror:
    workdir_owner.release()


include: "workflow/rules/common.smk"
include: "workflow/rules/workdir.smk"
include: "workflow/rules/envs.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/containers.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/prescreen.smk"
include: "workflow/rules/repeats.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/profiles.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/audit.smk"


rule all:
    default_target: True
    input:
        get_final_output(),
    localrule: True


rule frameworks_envs:
    """Every known framework's environment (the test suite needs them all)."""
    input:
        expand(rules.framework_env.output.stamp, framework=KNOWN_FRAMEWORKS),
    localrule: True


rule runs:
    input:
        all_run_records,
    localrule: True
