# config `profile`: each cell's profiled run (repeat 0; the train rules start it as any run),
# then its top operations by self time. No table or statistic reads these runs.
PROFILE_RECORDS = tuple(
    RUN_RECORD_TEMPLATE.format(**run.wildcards()) for run in GRID.profiled
)


rule profiles:
    input:
        records=PROFILE_RECORDS,
    output:
        "results/tables/profiles.csv",
    log:
        "logs/profiles.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        runs=GRID.profiled,
    script:
        "../scripts/profiles.py"
