# dlbench: the experiment grid in config/ becomes one training job per run, then tables,
# figures and the report. Usage: README.md.


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/envs.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/containers.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/audit.smk"


# With a cluster executor (profiles/slurm) these run where snakemake runs: the environments
# need the network, the analysis takes seconds. Training runs and batch searches are submitted.
localrules:
    all,
    frameworks_envs,
    runs,
    model_flops,
    aggregate,
    figures,
    references,
    audit,
    framework_env,
    report_document,


rule all:
    default_target: True
    input:
        "results/report/index.html",
        "results/tables/cells.md",
        "results/figures/throughput.png",
        "results/figures/speedup.png",
        "results/tables/references.csv",


rule frameworks_envs:
    input:
        framework_envs(),


rule runs:
    input:
        all_run_records(),
