# One virtual environment per framework, built from its hash lock (envs/<framework>.txt).
# Rebuilt only when missing or when the lock's content changed.
from dlbench.runners import capabilities, env_name, framework_names
from dlbench.runners.plugin import ENV_NAME

# The known frameworks' environments (a plug-in may use another framework's: its `env`); one
# that builds no model here (OneFlow: no build for this Python) has none.
KNOWN_FRAMEWORKS = sorted(
    {env_name(name) for name in framework_names() if capabilities(name).models}
)


rule framework_env:
    input:
        lock=os.path.join(REPO, "envs", "{framework}.txt"),
    output:
        stamp=os.path.join(VENVS, "{framework}", ".dlbench-env"),
    log:
        "logs/envs/{framework}.log",
    # A device's environment is named <framework>-<device> (envs/pytorch-cuda.txt).
    wildcard_constraints:
        framework=ENV_NAME,
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        venv=lambda wildcards: os.path.join(VENVS, wildcards.framework),
        script=os.path.join(REPO, "workflow", "scripts", "build_env.sh"),
    # On failure the log's tail goes to stderr: CI shows only Snakemake's output.
    shell:
        "bash {params.script} {input.lock} {params.venv} {output.stamp} > {log} 2>&1"
        " || {{ tail -n 25 {log} >&2; exit 1; }}"
