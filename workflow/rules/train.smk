# One job per run: the launcher starts one process per device in the framework's
# environment; each rank writes its raw step log next to launch.json.


rule train:
    input:
        env=lambda wildcards: ancient(framework_env(wildcards)),
    output:
        record=protected(RUN_RECORD_TEMPLATE),
    log:
        "logs/runs/{framework}/{model}/{precision}/{data}/bs{batch}/{scale}/{strategy}/rep{repeat}.log",
    conda:
        "../../envs/{framework}.yaml"
    threads: threads_per_run()
    resources:
        mem_mb=config["run"]["mem_mb"],
        runtime=config["run"]["time_limit_s"] // 60 + 5,
    params:
        args=launch_arguments,
        repo=REPO,
        python=framework_python,
    shell:
        "PYTHONPATH={params.repo} {params.python} -m dlbench.launch"
        " {params.args} --threads {threads} > {log} 2>&1"
