# One virtual environment per framework, built from its hash lock (envs/<framework>.txt).
# Rebuilt only when missing or when the lock's content changed.


rule framework_env:
    input:
        lock="envs/{framework}.txt",
    output:
        stamp=".venvs/{framework}/.dlbench-env",
    log:
        "logs/envs/{framework}.log",
    conda:
        ANALYSIS_ENV
    shell:
        "bash workflow/scripts/build_env.sh {input.lock} .venvs/{wildcards.framework} {output.stamp} > {log} 2>&1"
