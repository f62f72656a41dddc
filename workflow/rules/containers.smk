# Framework images (docs/containers.md). run.container: podman | apptainer | pyxis runs every
# rank in its framework's image, built here with podman from the env locks (rules podman_*),
# each pinned by <images>/<framework>.lock.json; pyxis's squashfs and Apptainer's .sif are made
# from it, each pinned by its own lock. The launcher checks them before any rank starts.
# The older path below (rules container_image, verify_image) is Snakemake's --sdm apptainer
# with the NGC recipes (containers/*.def): cluster only, never built here.
import sys

from dlbench.images import podman as dlbench_images
from dlbench.planning.deployment import IMAGE_RECORD
from dlbench.launch.container import image_name

IMAGE_STORE = DEPLOY.image_store


rule podman_images:
    """Build (where missing or out of date) the image of every framework in the grid."""
    input:
        expand(
            os.path.join(IMAGE_STORE, "{framework}.lock.json"),
            framework=sorted(
                {image_name(run.framework, DEPLOY.device) for run in GRID.runs}
            ),
        ),


rule podman_base:
    """The Debian base of every image: debootstrap from the host's apt mirror, no registry."""
    input:
        os.path.join(REPO, "containers", "base.sh"),
    output:
        os.path.join(IMAGE_STORE, "base.lock.json"),
    log:
        "logs/containers/podman_base.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    threads: threads_per_run()
    params:
        python=sys.executable,
    shell:
        "{params.python} -m dlbench.images.podman base --images $(dirname {output}) > {log} 2>&1"


rule podman_image:
    """One framework's image from its env lock, the recipe and dlbench's code; writes its lock.
    A newer env lock, recipe or code file rebuilds it: a new image, a new digest in the lock.
    """
    input:
        base=os.path.join(IMAGE_STORE, "base.lock.json"),
        env_lock=lambda wildcards: os.path.join(
            REPO, dlbench_images.env_lock(wildcards.framework)
        ),
        recipe=os.path.join(REPO, "containers", "Containerfile"),
        code=[str(path) for path in dlbench_images.code_files()],
    output:
        os.path.join(IMAGE_STORE, "{framework}.lock.json"),
    log:
        "logs/containers/podman_{framework}.log",
    # A device's image is <framework>-<device> (dlbench.launch.container.image_name); not
    # the base's lock (podman_base), whose name would otherwise match too.
    wildcard_constraints:
        framework=f"(?!base\\b){ENV_NAME}",
    localrule: True
    conda:
        ANALYSIS_ENV
    threads: threads_per_run()
    params:
        python=sys.executable,
    shell:
        "{params.python} -m dlbench.images.podman build {wildcards.framework}"
        " --images $(dirname {output}) > {log} 2>&1"


rule pyxis_squashfs:
    """run.container: pyxis: the squashfs file made from the framework's pinned podman image
    (podman export, mksquashfs with fixed owners and times), pinned by its own lock."""
    input:
        os.path.join(IMAGE_STORE, "{framework}.lock.json"),
    output:
        os.path.join(IMAGE_STORE, "{framework}.squashfs.lock.json"),
    log:
        "logs/containers/squashfs_{framework}.log",
    wildcard_constraints:
        framework=ENV_NAME,
    localrule: True
    conda:
        ANALYSIS_ENV
    threads: threads_per_run()
    params:
        python=sys.executable,
    shell:
        "{params.python} -m dlbench.images.squashfs {wildcards.framework}"
        " --images $(dirname {output}) > {log} 2>&1"


rule apptainer_sif:
    """run.container: apptainer: the .sif built from the framework's pinned OCI archive
    (apptainer build oci-archive:), pinned by its own lock."""
    input:
        os.path.join(IMAGE_STORE, "{framework}.lock.json"),
    output:
        os.path.join(IMAGE_STORE, "{framework}.sif.lock.json"),
    log:
        "logs/containers/sif_{framework}.log",
    wildcard_constraints:
        framework=ENV_NAME,
    localrule: True
    conda:
        ANALYSIS_ENV
    threads: threads_per_run()
    params:
        python=sys.executable,
    shell:
        "{params.python} -m dlbench.images.sif {wildcards.framework}"
        " --images $(dirname {output}) > {log} 2>&1"


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
        "{params.python} -m dlbench.images.apptainer check --for-build {wildcards.framework}\n"
        "recipe=$({params.python} -m dlbench.images.apptainer stage {wildcards.framework} {params.stage})\n"
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
