# One job per run: the launcher starts one process per device in the framework's
# environment; each rank writes its raw step log next to launch.json.


rule find_max_batch:
    input:
        env=lambda wildcards: ancient(framework_env(wildcards)),
    output:
        MAX_BATCH_TEMPLATE,
    log:
        "logs/batch_max/{device}/{framework}/{model}/{precision}.log",
    conda:
        ANALYSIS_ENV
    threads: threads_per_run()
    params:
        python=framework_python,
        repo=REPO,
    script:
        "../scripts/find_max_batch.py"


rule train:
    input:
        train_inputs,
    output:
        record=protected(RUN_RECORD_TEMPLATE),
    log:
        "logs/runs/{framework}/{model}/{precision}/{data}/bs{batch}/{scale}/{strategy}/rep{repeat}.log",
    conda:
        "../../envs/{framework}.yaml"
    # The framework's pinned image under --sdm apptainer (containers.smk); ignored otherwise.
    container:
        framework_container
    threads: threads_per_run()
    # Slurm job of one run, sized from its scale (common.smk); other executors ignore
    # all but mem_mb and runtime.
    resources:
        mem_mb=slurm_mem_mb,
        runtime=slurm_runtime,
        nodes=slurm_nodes,
        tasks=slurm_tasks,
        cpus_per_task=slurm_cpus_per_task,
        gpu=slurm_gpu,
        mpi=slurm_mpi,
        slurm_extra=slurm_extra,
        dlbench_attempt=snakemake_attempt,
    params:
        args=launch_arguments,
        repo=train_pythonpath,
        python=train_python,
        run_env=train_environment,
    shell:
        "{params.run_env} DLBENCH_ATTEMPT={resources.dlbench_attempt} PYTHONPATH={params.repo} {params.python} -m dlbench.launch"
        " {params.args} --threads {threads} > {log} 2>&1"
