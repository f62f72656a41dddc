# The human-readable report, built from the tables (per-model figures are drawn by the
# report itself; the environment section reads the step-log headers of the runs in runs.csv).


rule report_document:
    input:
        cells="results/tables/cells.csv",
        runs="results/tables/runs.csv",
        references="results/tables/references.csv",
    output:
        html=report(
            "results/report/index.html",
            caption="../report/index.rst",
            category="Report",
        ),
    log:
        "logs/report.log",
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/report.py"
