# Step logs → runs.csv (one row per run) → cells.csv (one row per cell) → figures;
# environment.json: the runs' environment from their step-log headers, for the report;
# losses.csv: every run's loss per step, for the loss curves and the convergence check.


# Each model kind's FLOPs formula (dlbench.model_kinds): the analysis environment, no framework.
rule model_flops:
    input:
        asked=dlbench_asked.FLOPS_TEMPLATE,
    output:
        "results/flops/{model}.json",
    log:
        "logs/flops/{model}.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        python=DEPLOY.flops_python(),
        repo=REPO,
        image_size=lambda w: planned_sizes_of(w.model)[0],
        seq_len=lambda w: planned_sizes_of(w.model)[1],
    shell:
        "PYTHONPATH={params.repo} {params.python} -m dlbench.analysis.flops --model {wildcards.model}"
        " --image-size {params.image_size} --seq-len {params.seq_len} --out {output} > {log} 2>&1"


rule aggregate:
    input:
        records=adaptive_records if ADAPTIVE else all_run_records(),
        flops=model_flops_files(),
        prescreen=PRESCREEN_RECORDS,
        # The config and grid the tables are for: rewritten when they change (workdir.smk).
        asked=dlbench_asked.TABLES,
    output:
        **({"prescreen": "results/tables/prescreen.csv"} if PRESCREEN_RECORDS else {}),
        runs="results/tables/runs.csv",
        cells=report(
            "results/tables/cells.csv",
            caption="../report/cells.rst",
            category="Tables",
        ),
        markdown="results/tables/cells.md",
        environment="results/tables/environment.json",
        losses="results/tables/losses.csv",
        campaign="results/campaign.json",
    log:
        "logs/aggregate.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        planned=planned_record,
    script:
        "../scripts/aggregate.py"


rule figures:
    input:
        cells="results/tables/cells.csv",
    output:
        throughput=report(
            "results/figures/throughput.png",
            caption="../report/throughput.rst",
            category="Figures",
        ),
        speedup=report(
            "results/figures/speedup.png",
            caption="../report/speedup.rst",
            category="Figures",
        ),
        data=report(
            "results/figures/real_vs_synthetic.png",
            caption="../report/real_vs_synthetic.rst",
            category="Figures",
        ),
    log:
        "logs/figures.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/figures.py"


rule references:
    input:
        cells="results/tables/cells.csv",
        published=published_references(),
        baseline=(
            [config["references"]["baseline"]]
            if config["references"]["baseline"]
            else []
        ),
    output:
        references=report(
            "results/tables/references.csv",
            caption="../report/references.rst",
            category="Tables",
        ),
    log:
        "logs/references.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/references.py"
