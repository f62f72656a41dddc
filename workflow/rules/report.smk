# The human-readable report, built from the tables and figures only.


rule report_document:
    input:
        cells="results/tables/cells.csv",
        runs="results/tables/runs.csv",
        throughput="results/figures/throughput.png",
        speedup="results/figures/speedup.png",
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
