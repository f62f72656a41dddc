# Datasets of `data: real` runs (README, Datasets): an ImageNet-layout directory (generated,
# or data.images.source) converted to each dataset format the frameworks read (their
# capabilities' image_format), in the environment of the framework that `converts` it, and
# BERT pre-training examples, and the LLMs' byte-level tokens. Paths and file lists: dlbench/planning/datasets.py.
import shlex
from types import SimpleNamespace

IMAGE_SETTINGS = data_paths.image_settings(config)
TEXT_SETTINGS = data_paths.text_settings(config)
TOKEN_SETTINGS = data_paths.token_settings(config)
IMAGE_SPLITS = " ".join(IMAGE_SETTINGS["splits"])
# common.smk's framework_env / framework_python take wildcards with a `framework` (the
# environment's name): the converter environment of each format.
FORMAT_ENVS = {
    fmt: SimpleNamespace(framework=data_paths.converter_env(fmt))
    for fmt in data_paths.FORMATS
}
FORMAT_CONDA = {
    fmt: f"../../envs/{env.framework}.yaml" for fmt, env in FORMAT_ENVS.items()
}


rule datasets:
    input:
        *(data_paths.format_files(fmt, config) for fmt in data_paths.image_formats()),
        data_paths.format_files(data_paths.TEXT_FORMAT, config),
        data_paths.format_files(data_paths.TOKEN_FORMAT, config),


rule generate_images:
    output:
        directory(data_paths.generated_images_dir(config)),
    log:
        "logs/data/generate_images.log",
    conda:
        ANALYSIS_ENV
    params:
        settings=IMAGE_SETTINGS,
    script:
        "../scripts/generate_images.py"


rule tfrecords:
    input:
        source=data_paths.images_source(config),
        env=framework_env(FORMAT_ENVS["tfrecord"]),
    output:
        data_paths.format_files("tfrecord", config),
    log:
        "logs/data/tfrecords.log",
    conda:
        FORMAT_CONDA["tfrecord"]
    params:
        python=framework_python(FORMAT_ENVS["tfrecord"]),
        repo=lambda wildcards: REPO,
        script=os.path.join(REPO, "workflow", "scripts", "convert_tfrecord.py"),
        splits=IMAGE_SPLITS,
        seed=IMAGE_SETTINGS["seed"],
        shards=IMAGE_SETTINGS["shards"],
        val_shards=IMAGE_SETTINGS["val_shards"],
        out=lambda wildcards, output: os.path.dirname(output[-1]),
    shell:
        "TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH={params.repo} {params.python} {params.script}"
        " --source {input.source:q} --splits {params.splits} --seed {params.seed}"
        " --shards {params.shards} --val-shards {params.val_shards} --out {params.out} > {log} 2>&1"


rule imagefolder:
    input:
        source=data_paths.images_source(config),
        env=framework_env(FORMAT_ENVS["imagefolder"]),
    output:
        data_paths.format_files("imagefolder", config),
    log:
        "logs/data/imagefolder.log",
    conda:
        FORMAT_CONDA["imagefolder"]
    params:
        python=framework_python(FORMAT_ENVS["imagefolder"]),
        repo=lambda wildcards: REPO,
        script=os.path.join(REPO, "workflow", "scripts", "convert_imagefolder.py"),
        splits=IMAGE_SPLITS,
        out=lambda wildcards, output: os.path.dirname(output[-1]),
    shell:
        "PYTHONPATH={params.repo} {params.python} {params.script}"
        " --source {input.source:q} --splits {params.splits} --out {params.out} > {log} 2>&1"


rule recordio:
    input:
        source=data_paths.images_source(config),
        env=framework_env(FORMAT_ENVS["recordio"]),
    output:
        data_paths.format_files("recordio", config),
    log:
        "logs/data/recordio.log",
    conda:
        FORMAT_CONDA["recordio"]
    params:
        python=framework_python(FORMAT_ENVS["recordio"]),
        repo=lambda wildcards: REPO,
        script=os.path.join(REPO, "workflow", "scripts", "convert_recordio.py"),
        splits=IMAGE_SPLITS,
        seed=IMAGE_SETTINGS["seed"],
        out=lambda wildcards, output: os.path.dirname(output[-1]),
    shell:
        "PYTHONPATH={params.repo} {params.python} {params.script}"
        " --source {input.source:q} --splits {params.splits} --seed {params.seed} --out {params.out} > {log} 2>&1"


# Tokenised once, in the environment that converts format "bert" (PyTorch's: Hugging Face
# tokenizers); every framework reads the same examples.npz. No corpus file: the Python Language Reference (pydoc_data).
rule bert_data:
    input:
        corpus=[TEXT_SETTINGS["corpus"]] if TEXT_SETTINGS["corpus"] else [],
        env=framework_env(FORMAT_ENVS["bert"]),
    output:
        data_paths.format_files(data_paths.TEXT_FORMAT, config),
    log:
        "logs/data/bert_data.log",
    conda:
        FORMAT_CONDA["bert"]
    params:
        python=framework_python(FORMAT_ENVS["bert"]),
        repo=lambda wildcards: REPO,
        script=os.path.join(REPO, "workflow", "scripts", "bert_data.py"),
        corpus=lambda wildcards, input: (
            f"--corpus {shlex.quote(input.corpus[0])}" if input.corpus else ""
        ),
        # every data.text setting but the corpus (an input), as bert_data.py's options
        settings=" ".join(
            f"--{key.replace('_', '-')} {value}"
            for key, value in TEXT_SETTINGS.items()
            if key != "corpus"
        ),
        out=lambda wildcards, output: os.path.dirname(output[-1]),
    shell:
        "PYTHONPATH={params.repo} {params.python} {params.script} {params.corpus} {params.settings}"
        " --out {params.out} > {log} 2>&1"


# The LLMs' real text (dlbench/data/tokens.py): byte-level, no tokenizer to train, so it is
# packed in the analysis environment, once, and every framework reads the same tokens.npy.
rule llm_tokens:
    input:
        corpus=[TOKEN_SETTINGS["corpus"]] if TOKEN_SETTINGS["corpus"] else [],
    output:
        data_paths.format_files(data_paths.TOKEN_FORMAT, config),
    log:
        "logs/data/llm_tokens.log",
    conda:
        ANALYSIS_ENV
    params:
        settings=TOKEN_SETTINGS,
    script:
        "../scripts/llm_tokens.py"
