"""Where a training job's software comes from, and the parts of its command line that depend
on it: the framework's venv (the default), its conda env (--sdm conda) or its pinned Apptainer
image (--sdm apptainer; docs/containers.md). The rule files bind these methods as their input
and params functions (common.smk, containers.smk, train.smk); wildcards are Snakemake's (any
object with the run's coordinates as attributes). Analysis environment.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Collection, Mapping

from dlbench import provenance
from dlbench.coords import RUN_DIR_TEMPLATE, Scale
from dlbench.images import apptainer as containers
from dlbench.images import podman as images
from dlbench.launch.container import IMAGE_CODE_DIR, image_name, lock_path
from dlbench.launch.request import SITE_KNOBS, LaunchRequest, argv_of
from dlbench.models import kind_of
from dlbench.planning import datasets as data_paths
from dlbench.planning import venvs
from dlbench.planning.grid import planned_sizes
from dlbench.planning.snakemake_api import (
    DeploymentMethod,
    RerunTrigger,
    RunWildcards,
    ancient,
    is_template,
    quote_template,
    run_coords,
)
from dlbench.protocol import RunProtocol
from dlbench.runners import processes_per_node
from dlbench.runners.plugin import Capabilities

# What verify_image checked; the training job's step-log header takes the image digest from it.
IMAGE_RECORD = "results/containers/{framework}.image.json"
# Where the environment build leaves its stamp (envs.smk), below the framework's venv.
ENV_STAMP = ".dlbench-env"


class DeploymentError(ValueError):
    pass


# The training rules' `conda:` file, relative to the rule files.
CONDA_FILE = "../../envs/{framework}.yaml"


def conda_file(runs, device: str = "cpu") -> str | Callable:
    """The `conda:` of a training rule for `runs` on `device`: a pattern when every framework's
    environment is its name and one suffix (`pytorch-cuda`: no function per job), else a
    function of the wildcards."""
    envs = {fw: venvs.env_of(fw, device) for fw in {run.framework for run in runs}}
    suffixes = {env.removeprefix(fw) for fw, env in envs.items() if env.startswith(fw)}
    if len(suffixes) == 1 and all(env.startswith(fw) for fw, env in envs.items()):
        return CONDA_FILE.replace("{framework}", "{framework}" + suffixes.pop())
    return lambda wildcards: CONDA_FILE.format(framework=venvs.env_of(wildcards.framework, device))


class Deployment:
    """One workflow invocation's deployment: `config` validated (defaults filled in), `repo`
    the workflow's directory, `methods` Snakemake's --sdm; DLBENCH_VENVS, DLBENCH_IMAGES and
    DLBENCH_IMAGES_LOCK in `environ` move the venvs, the images and the images' lock."""

    def __init__(
        self,
        config: dict,
        repo: str,
        methods: Collection[DeploymentMethod],
        rerun_triggers: Callable[[], Collection[RerunTrigger]] = tuple,
        environ: Mapping = os.environ,
    ):
        apptainer, conda = DeploymentMethod.APPTAINER in methods, DeploymentMethod.CONDA in methods
        # run.container: the launcher runs every rank in the framework's pinned image.
        self.runtime = config["run"].get("container", "none")
        if apptainer and self.runtime != "none":
            raise DeploymentError(
                f"run.container: {self.runtime} runs every rank in its image already: drop --sdm apptainer"
            )
        if apptainer and config["run"]["launcher"] == "srun":
            # Snakemake runs the whole job command in the image: srun is not there and
            # --cleanenv drops SLURM_*. Multi-node runs need the ranks, not the launcher, in it.
            raise DeploymentError(
                "run.launcher: srun does not work inside an Apptainer image yet (docs/containers.md, "
                "Known gaps): use run.container: apptainer instead, which starts one container per rank"
            )
        if self.runtime == "pyxis" and config["run"]["launcher"] != "srun":
            raise DeploymentError("run.container: pyxis starts every rank through srun: set run.launcher: srun")
        self.config, self.repo, self.apptainer, self.conda = config, repo, apptainer, conda
        # run.python: frameworks whose ranks run in a site's own Python, not in .venvs/<env>.
        self.site_pythons: dict[str, str] = dict(config["run"].get("python") or {})
        if self.site_pythons and (apptainer or conda or self.runtime != "none"):
            how = "--sdm apptainer" if apptainer else "--sdm conda" if conda else f"run.container: {self.runtime}"
            raise DeploymentError(
                f"run.python names site environments ({', '.join(self.site_pythons)}), which {how} "
                "would not use: drop one of the two"
            )
        # run.device picks each framework's environment (envs/<framework>-cuda.txt on CUDA).
        self.device = config["run"].get("device", "cpu")
        self.venvs = venvs.venvs_dir(repo, environ)
        self.images_lock = os.path.abspath(
            environ.get("DLBENCH_IMAGES_LOCK", os.path.join(repo, "containers", "images.lock"))
        )
        self.image_pins = containers.load_lock(self.images_lock)  # ContainerError
        # Built images are large: keep them where the cluster keeps such things.
        self.images_dir = os.path.abspath(environ.get("DLBENCH_IMAGES", os.path.join(repo, "containers")))
        self.image_file = os.path.join(self.images_dir, "{framework}.sif")
        # run.container's images, their store and locks (dlbench.images.podman): shared by every workdir.
        self.image_store = str(images.images_dir(environ))
        # The resolved config, hashed into every run's header.
        self.config_sha256 = provenance.config_sha256(config)
        # With mtime the only rerun trigger (the profiles' setting), a venv whose stamp is
        # newer than its lock would not be rebuilt: training jobs need not list it as an input,
        # which saves Snakemake resolving one input per job (benchmarks/README.md, DAG cost).
        # Asked when the DAG is built (Snakemake knows its triggers only then).
        self.rerun_triggers = rerun_triggers
        self._venv_built: dict[str, bool] = {}

    # ---- the framework's venv ----

    def venv_stamp(self, wildcards) -> str:
        return os.path.join(self.venvs, venvs.env_of(wildcards.framework, self.device), ENV_STAMP)

    def venv_inputs(self, wildcards) -> list:
        """The venv a job needs built first: none for a site environment (run.python)."""
        return [] if wildcards.framework in self.site_pythons else [self.venv_stamp(wildcards)]

    def venv_python(self, wildcards) -> str:
        return venvs.venv_python(self.venvs, wildcards.framework, self.device, self.site_pythons)

    def flops_python(self) -> str:
        """The Python that counts a model's FLOPs: the analysis environment's (each model kind's
        formula, dlbench.model_kinds; no framework needed), conda's under --sdm conda."""
        return "python" if self.conda else sys.executable

    # ---- the framework's image (--sdm apptainer) ----

    def image(self, wildcards) -> str:
        if wildcards.framework not in self.image_pins:
            raise DeploymentError(
                f"containers/images.lock has no [{wildcards.framework}] image (known: {', '.join(self.image_pins)})"
            )
        return self.image_file.format(framework=wildcards.framework)

    def container(self, wildcards) -> str | None:
        """The training rule's `container:` (None, so no image is even named, without --sdm apptainer)."""
        return self.image(wildcards) if self.apptainer else None

    def image_inputs(self, wildcards) -> list:
        """A training job's image and verification record under --sdm apptainer, else nothing:
        inputs, so that `snakemake -n --sdm apptainer` shows each job's image, and so that no
        job starts before its image has been verified."""
        if not self.apptainer:
            return []
        return [ancient(self.image(wildcards)), ancient(IMAGE_RECORD.format(framework=wildcards.framework))]

    def venv_built(self, wildcards) -> bool:
        """The venv's stamp is newer than its lock and only mtime triggers a rebuild."""
        if wildcards.framework not in self._venv_built:
            env = venvs.env_of(wildcards.framework, self.device)
            stamp, lock = self.venv_stamp(wildcards), os.path.join(self.repo, "envs", f"{env}.txt")
            built = os.path.exists(stamp) and os.path.exists(lock) and os.path.getmtime(stamp) >= os.path.getmtime(lock)
            self._venv_built[wildcards.framework] = built and set(self.rerun_triggers()) == {RerunTrigger.MTIME}
        return self._venv_built[wildcards.framework]

    def image_lock(self, wildcards) -> str:
        """run.container's image lock, which the image's build rule writes (containers.smk)."""
        return str(lock_path(self.image_store, image_name(wildcards.framework, self.device)))

    def software_inputs(self, wildcards) -> list:
        """What a training job runs in: its image (run.container: its lock, and the lock of the
        file made from it for pyxis and Apptainer; --sdm apptainer: the verified image), else
        its venv (unless built)."""
        # Never ancient(): Snakemake 9 leaves out a job whose ancient input is being rebuilt
        # (and every job after it), and exits 0 (docs/reliability.md).
        if self.runtime != "none":
            image = os.path.join(self.image_store, image_name(wildcards.framework, self.device))
            files = {"apptainer": [f"{image}.sif.lock.json"], "pyxis": [f"{image}.squashfs.lock.json"]}
            return [self.image_lock(wildcards), *files.get(self.runtime, [])]
        if self.apptainer:
            return self.image_inputs(wildcards)
        if wildcards.framework in self.site_pythons or self.venv_built(wildcards):
            return []
        return [self.venv_stamp(wildcards)]

    # ---- the training command ----

    def python(self, wildcards) -> str:
        """The image's or the conda env's python (--sdm apptainer / conda), else the venv's;
        with run.container, the launcher runs on the host (stdlib only) and the ranks in the image."""
        if self.runtime != "none":
            return sys.executable
        if self.apptainer:
            return "python3"
        return "python" if self.conda else self.venv_python(wildcards)

    def pythonpath(self, wildcards) -> str:
        return containers.IMAGE_CODE_DIR if self.apptainer else self.repo

    def env_lock(self, wildcards) -> str | None:
        """The env lock to hash into the header: the image's copy inside a container; none
        for a site environment (its header lists its distributions instead)."""
        if wildcards.framework in self.site_pythons:
            return None
        if self.runtime != "none":
            return os.path.join(IMAGE_CODE_DIR, "envs", f"{image_name(wildcards.framework, self.device)}.txt")
        return os.path.join(self.pythonpath(wildcards), "envs", f"{venvs.env_of(wildcards.framework, self.device)}.txt")

    def environment(self, wildcards) -> str:
        """Variables for the training command (set in the command: --cleanenv drops the host's)."""
        values = {"DLBENCH_CONFIG_SHA256": self.config_sha256}
        if self.apptainer:
            values["DLBENCH_IMAGE_RECORD"] = os.path.abspath(IMAGE_RECORD.format(framework=wildcards.framework))
        return " ".join(f"{k}={v}" for k, v in values.items())

    def command(self, wildcards, launch_arguments: str) -> str:
        """The launcher's command line in the framework's environment (or image)."""
        return (
            f"{self.environment(wildcards)} PYTHONPATH={self.pythonpath(wildcards)} "
            f"{self.python(wildcards)} -m dlbench.launch {launch_arguments}"
        )

    def data_dir(self, wildcards) -> str:
        """The framework's converted dataset a real-data run reads (data.smk builds it)."""
        return data_paths.dataset_path(wildcards.framework, kind_of(wildcards.model).name, self.config)

    def data_workers(self, wildcards) -> int:
        """Input-pipeline workers per rank: config, else the rank's share of the run's CPUs."""
        run = self.config["run"]
        if run["data_workers"]:
            return run["data_workers"]
        per_node = Scale.parse(wildcards.scale).devices_per_node
        processes = processes_per_node(wildcards.framework, wildcards.strategy, per_node)
        return max(1, run["threads"] // processes)

    def launch_arguments(self, wildcards, protocol: RunProtocol, max_batch_file: str | None) -> str:
        """The launcher's command line (a LaunchRequest's, shell-quoted); every value has passed
        the schema's strict patterns. With `Placeholders` for wildcards: its template."""
        settings = self.request_settings(wildcards, protocol, max_batch_file)
        if is_template(wildcards):
            return " ".join(quote_template(arg) for arg in argv_of(wildcards, settings))
        return shlex.join(LaunchRequest(coords=run_coords(wildcards), **settings).to_argv())

    def launch_request(self, wildcards, protocol: RunProtocol, max_batch_file: str | None) -> LaunchRequest:
        return LaunchRequest(coords=run_coords(wildcards), **self.request_settings(wildcards, protocol, max_batch_file))

    def request_settings(self, wildcards, protocol: RunProtocol, max_batch_file: str | None) -> dict:
        """A run's LaunchRequest but its coordinates, from its wildcards (or a template's)."""
        run, real = self.config["run"], wildcards.data == "real"
        image_size, seq_len = planned_sizes(run, getattr(wildcards, "sizes_of", None) or wildcards.model)
        return dict(
            protocol=protocol,
            run_dir=RUN_DIR_TEMPLATE.format(**wildcards),
            image_size=image_size,
            seq_len=seq_len,
            max_batch_file=max_batch_file,
            threads=run["threads"],
            device=run["device"],
            compile=run["compile"],
            time_limit=run["time_limit_s"],
            progress_every=run["progress_every"],
            memory_cap_mb=run["memory_cap_mb"],
            allocator=run["allocator"],
            env_lock=self.env_lock(wildcards),
            python_env="site" if wildcards.framework in self.site_pythons else "lock",
            options=Capabilities.options_text(self.config.get("framework_options", {}).get(wildcards.framework)),
            launcher=run["launcher"],
            data_dir=self.data_dir(wildcards) if real else "",
            data_workers=self.data_workers(wildcards) if real else 1,
            container=self.runtime,
            images=self.image_store if self.runtime != "none" else "",
            # the site knobs, as the schema resolved them (the request's defaults are the same)
            **{key: run[key] for key in SITE_KNOBS if key in run},
        )

    def srun_lines(self, runs, protocol: RunProtocol) -> list[str]:
        """Under run.launcher: srun, the step each (framework, scale) starts its ranks with, as the
        launcher will build it (printed when the workflow is planned, `snakemake -n` included)."""
        from dlbench.launch.container import ImageMismatch
        from dlbench.launch.launchers import SrunLauncher

        lines, seen = [], set()
        for run in runs:
            if (run.framework, run.scale) in seen:
                continue
            seen.add((run.framework, run.scale))
            wildcards = RunWildcards.of(run)
            launcher = SrunLauncher(self.launch_request(wildcards, protocol, None))
            try:
                line = shlex.join(launcher.command())
            except ImageMismatch:  # no image lock yet (the workflow builds it first): the rank's part elided
                launcher.rank_command = lambda: ["<rank command: the image is not built yet>"]
                line = shlex.join(launcher.command())
            lines.append(f"{run.framework} {run.scale}: {line}")
        return lines


def quoted(request: LaunchRequest) -> str:
    """A request's command line for a shell."""
    return shlex.join(request.to_argv())
