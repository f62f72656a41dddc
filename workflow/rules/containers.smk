# Apptainer images, one per framework (docs/containers.md). Used only with
# --software-deployment-method apptainer (the Slurm profile with DLBENCH_APPTAINER=1): the training rule runs in
# <framework>.sif, after verify_image has checked the file's sha256 against
# containers/images.lock. The local default keeps the venvs and never touches an image.
import sys

from dlbench.deployment import IMAGE_RECORD


rule container_images:
    """Build (where missing) and verify the image of every framework in the grid."""
    input:
        expand(IMAGE_RECORD, framework=sorted({run.framework for run in GRID.runs})),


rule container_image:
    """Build <framework>.sif from containers/<framework>.def; needs `apptainer` on this host.

    Runs only when the image is missing (ancient inputs): a rebuild is a new file with a new
    sha256, which verify_image then refuses until it is pinned.
    """
    input:
        recipe=ancient(os.path.join(REPO, "containers", "{framework}.def")),
        lock=ancient(os.path.join(REPO, "envs", "{framework}.txt")),
    output:
        image=DEPLOY.image_file,
    log:
        "logs/containers/build_{framework}.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        python=sys.executable,
        stage=lambda wildcards: os.path.join(
            DEPLOY.images_dir, "build", wildcards.framework
        ),
        build_args=os.environ.get("DLBENCH_APPTAINER_BUILD_ARGS", "--fakeroot"),
    shell:
        "if ! command -v apptainer > /dev/null; then"
        " echo 'container_image: apptainer is not installed on this host; build {output.image} where it is"
        " (docs/containers.md)' >&2; exit 1; fi\n"
        "log=$(realpath -m {log})\n"
        "cd $(dirname {input.recipe})/..\n"
        "{params.python} -m dlbench.containers check --for-build {wildcards.framework}\n"
        "recipe=$({params.python} -m dlbench.containers stage {wildcards.framework} {params.stage})\n"
        "cd {params.stage} && apptainer build {params.build_args} {output.image} $recipe > $log 2>&1"


rule verify_image:
    """Stop the framework's jobs unless its image's sha256 is the one images.lock pins."""
    input:
        image=DEPLOY.image_file,
        lock=ancient(DEPLOY.images_lock),
    output:
        record=IMAGE_RECORD,
    log:
        "logs/containers/verify_{framework}.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    params:
        python=sys.executable,
        script=os.path.join(REPO, "workflow", "scripts", "verify_image.py"),
    shell:
        "{params.python} {params.script} --framework {wildcards.framework} --image {input.image}"
        " --lock {input.lock} --record {output.record} --log {log}"
