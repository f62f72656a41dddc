# The human-readable report, built from the tables alone (per-model figures are drawn by the
# report itself; the environment section is environment.json, written by the aggregate rule).


rule report_document:
    input:
        cells="results/tables/cells.csv",
        runs="results/tables/runs.csv",
        references="results/tables/references.csv",
        environment="results/tables/environment.json",
        losses="results/tables/losses.csv",
        published=published_references(),
        # config profile: the profiled runs' top operations (profiles.smk)
        profiles=["results/tables/profiles.csv"] if GRID.profiled else [],
    output:
        html=report(
            "results/report/index.html",
            caption="../report/index.rst",
            category="Report",
        ),
    log:
        "logs/report.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/report.py"
