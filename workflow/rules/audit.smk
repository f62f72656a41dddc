# The audit: tables recomputed from raw logs alone must match byte for byte; raw logs must
# be unchanged since the tables were made. Run: snakemake --profile profiles/local -f audit


rule audit:
    input:
        records=adaptive_records if ADAPTIVE else all_run_records,
        flops=model_flops_files(),
        runs="results/tables/runs.csv",
        cells="results/tables/cells.csv",
    output:
        manifest="results/audit/manifest.json",
        verdict="results/audit/verdict.txt",
    log:
        "logs/audit.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        planned=planned_record,
    script:
        "../scripts/audit.py"
