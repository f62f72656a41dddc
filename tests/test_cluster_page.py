"""docs/cluster.md, "Run on your cluster": every `sh` block of the page is run here, as the page's
"What ran here" says. Blocks are found by their `<!-- page-test: NAME -->` marker and run with
bash after the page's own `setup` and `profile` blocks, with the substitutions SUBSTITUTE states
(the repository, temporary directories, the local cluster's partition and account).

- Dry runs (`-n` added) with the page's 4x8 CUDA grid as written: what each command would build
  or submit, checked against what the page says.
- For real on the local Slurm cluster (tools/slurm-local/up.sh; `slurm` tests skip without it),
  with a tiny CPU grid of the toy plug-in (tests/plugins) in place of my-grid.yaml: the run,
  killed once its first job started, resumed to the report, audited, archived and regenerated.
- Apptainer's block is planned (dry), as pyxis's: its .sif is made where Apptainer is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import REPO, framework_python
from tests.test_slurm import cluster_answers

PAGE = REPO / "docs" / "cluster.md"
MARKED = re.compile(r"<!-- page-test: ([\w-]+) -->\n```(\w+)\n(.*?)```", re.S)
FENCE = re.compile(r"^```(\w+)$", re.M)
# How each block is run: "real", or "dry" (-n added).
RUNS = {
    "setup": "real",
    "bootstrap": "real",
    "envs": "real and dry",
    "envs-cuda": "dry",
    "profile": "real",
    "size": "dry",  # the block is itself a dry run
    "images": "dry",
    "pyxis": "dry",
    "apptainer": "dry",
    "prescreen": "dry",
    "run": "real and dry",
    "resume": "real",
    "audit": "real",
    "archive": "real",
}
# The tiny grid the real runs use in place of my-grid.yaml: the toy plug-in under srun.
TOY_GRID = {
    "grid": {
        "frameworks": ["toy"],
        "models": ["resnet50"],
        "batch_per_device": [4],
        "data": ["synthetic"],
        "precision": ["fp32"],
        "scales": ["1x1", "1x2", "2x2"],
        "strategies": {"toy": ["replicas"]},
    },
    "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
    "run": {"image_size": 32, "threads": 2, "launcher": "srun", "mem_mb": 500, "time_limit_s": 120},
}
TOY_RUNS = {"1x1": "single", "1x2": "replicas", "2x2": "replicas"}


def page_blocks() -> dict[str, str]:
    text = PAGE.read_text()
    blocks = {}
    for name, language, body in MARKED.findall(text):
        assert language == "sh", f"page-test {name}: a {language} block"
        assert name not in blocks, f"page-test {name}: twice"
        blocks[name] = body
    return blocks


def page_grid() -> str:
    """The page's grid file: its yaml block that starts with `# my-grid.yaml`."""
    (grid,) = [b for b in re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S) if b.startswith("# my-grid.yaml")]
    return grid


def substitute(text: str, paths: dict[str, Path]) -> str:
    """SUBSTITUTE: the page's site paths and names → this machine's."""
    for pattern, key in SUBSTITUTE:
        value = str(paths[key]) if key in paths else key
        text = re.sub(pattern, lambda _m, value=value: value, text)
    return text


SUBSTITUTE = [
    (r"/shared/dlbench-venvs", "venvs"),
    (r"/shared/dlbench-images", "images"),
    (r"/shared/dlbench\b", "repo"),
    (r"/shared/campaigns/resnet50-4x8", "work"),
    (r"/shared/archive/resnet50-4x8", "archive"),
    (r"DLBENCH_SLURM_PARTITION=gpu\b", "DLBENCH_SLURM_PARTITION=debug"),
    (r"DLBENCH_SLURM_ACCOUNT=myproject\b", "DLBENCH_SLURM_ACCOUNT=root"),
]


def script(name: str, paths: dict[str, Path], dry: bool = False, toy: bool = False) -> str:
    blocks = page_blocks()
    lines = []
    for block in ("setup", "profile", name) if name not in ("setup", "profile") else ("setup", name):
        for line in blocks[block].splitlines():
            line = re.sub(r"\s+#\s.*$", "", line)  # the page's comments
            if dry and re.match(r'(snakemake |bash "\$REPO/tools/containers.sh")', line) and " -n" not in line:
                line += " -n"
            if toy:
                line = line.replace("my-grid.yaml", "toy-grid.yaml")
                line = line.replace("--profile slurm", "--profile slurm --slurm-init-seconds-before-status-checks 2")
            lines.append(line)
    return substitute("\n".join(lines) + "\n", paths)


def environment(paths: dict[str, Path], toy: bool, extra_path: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLBENCH_SLURM_", "DLBENCH_FRAMEWORK_PATH"))}
    env["HOME"] = str(paths["home"])
    if toy:
        env["DLBENCH_FRAMEWORK_PATH"] = str(REPO / "tests" / "plugins")
    if extra_path:
        env["PATH"] = f"{extra_path}:{env['PATH']}"
    return env


def run_block(name, paths, dry=False, toy=False, timeout=120, extra_path=None, **popen):
    code = script(name, paths, dry=dry, toy=toy)
    command = ["bash", "-euo", "pipefail", "-c", code]
    env = environment(paths, toy, extra_path)
    if popen:
        return subprocess.Popen(command, env=env, **popen)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    result.output = result.stdout + result.stderr
    return result


def make_paths(root: Path, venvs: Path | None = None) -> dict[str, Path]:
    paths = {
        "repo": REPO,
        "work": root / "work",
        "home": root / "home",
        "images": root / "images",
        "archive": root / "archive",
        "venvs": venvs or root / "venvs",
    }
    for key in ("work", "home", "images"):
        paths[key].mkdir(parents=True, exist_ok=True)
    (paths["work"] / "my-grid.yaml").write_text(page_grid())
    (paths["work"] / "toy-grid.yaml").write_text(yaml.safe_dump(TOY_GRID))
    return paths


@pytest.fixture
def dry(tmp_path):
    """Paths for a dry run: empty venvs and images directories."""
    paths = make_paths(tmp_path)
    paths["venvs"].mkdir()
    return paths


def jobs(output: str) -> dict[str, list[str]]:
    """rule → the outputs of its planned jobs, from a dry run's log."""
    planned = {}
    for rule, out in re.findall(r"^(?:local)?rule (\S+):\n(?:    .*\n)*?    output: (.*)$", output, re.M):
        planned.setdefault(rule, []).append(out)
    return planned


def resources(output: str, rule: str) -> str:
    (line,) = set(re.findall(rf"^rule {rule}:\n(?:    .*\n)*?    resources: (.*)$", output, re.M))
    return line


# ---------------------------------------------------------------- the page itself


def test_every_sh_block_is_marked_and_run_and_said_so():
    text = PAGE.read_text()
    blocks = page_blocks()
    languages = [m for m in FENCE.findall(text) if m != "yaml"]
    assert len(languages) == len(blocks), "an unmarked code block: mark it <!-- page-test: NAME -->"
    assert set(blocks) == set(RUNS)
    said = text.split("## What ran here", 1)[1]
    for name in RUNS:
        if name not in ("setup",):
            assert f"`{name}`" in said, f"'What ran here' does not say how `{name}` ran"


def test_the_readme_links_the_page():
    head = (REPO / "README.md").read_text().split("## ", 1)[0]
    assert "docs/cluster.md" in head


# ---------------------------------------------------------------- dry runs of the 4x8 CUDA grid


def test_envs_plan_exactly_the_grids_environments_and_nothing_else(dry):
    planned = {}
    for name in ("envs", "envs-cuda"):
        result = run_block(name, dry, dry=True)
        assert result.returncode == 0, result.output[-3000:]
        found = jobs(result.output)
        assert set(found) <= {"framework_env"}, found  # no dataset, image or training job
        planned[name] = {Path(out).parent.name for out in found.get("framework_env", [])}
        assert all(out.startswith(str(dry["venvs"])) for out in found.get("framework_env", []))
    # Ranks in the image and FLOPs from the kind's formula: the pyxis grid needs no venv.
    assert planned == {"envs": set(), "envs-cuda": {"pytorch-cuda"}}
    assert not any(dry["venvs"].iterdir())


def test_size_shows_origins_and_each_jobs_slurm_request_as_the_page_quotes_it(dry):
    result = run_block("size", dry)
    assert result.returncode == 0, result.output[-3000:]
    grid_lines = page_grid().splitlines()
    threads_line = next(i for i, line in enumerate(grid_lines, 1) if line.lstrip().startswith("threads:"))
    assert re.search(rf"^run\.threads\s+96\s+my-grid\.yaml:{threads_line}$", result.output, re.M)
    # the plan summary: the grid's cost, checked against run.max_device_hours
    assert re.search(r"^dlbench plan: 12 runs in 4 cells", result.output, re.M)
    assert re.search(r"estimated [\d.]+ GPU-hours", result.output)
    # each job's resources as step 3 quotes them for train_4x8
    quoted = re.search(r"for `train_4x8`, `([^`]*)`", " ".join(PAGE.read_text().split())).group(1)
    quoted = quoted.replace("slurm_partition=gpu", "slurm_partition=debug")  # SUBSTITUTE's
    asked = resources(result.output, "train_4x8")
    for item in re.split(r", (?=\w+=)", quoted):
        assert item in asked, (item, asked)
    one_gpu = resources(result.output, "train_1x1")
    assert "gpu=1" in one_gpu and "cpus_per_task=96" in one_gpu, one_gpu
    step = re.search(r"^srun step: pytorch 4x8: (.*)$", result.output, re.M).group(1)
    for flag in ("--nodes=4", "--ntasks=32", "--ntasks-per-node=8", "--cpus-per-task=12", "--gpus-per-node=h100:8"):
        assert flag in step.split(), flag
    assert f"--container-image={dry['images']}/pytorch-cuda.sqsh" in step.split()


@pytest.mark.skipif(
    not all(shutil.which(t) for t in ("podman", "debootstrap", "runc", "buildah", "skopeo", "mksquashfs")),
    reason="tools/containers.sh would apt-get its tools first",
)
def test_images_plan_the_grids_cuda_image_and_build_nothing(dry):
    result = run_block("images", dry, dry=True)
    assert result.returncode == 0, result.output[-3000:]
    found = jobs(result.output)
    assert found == {
        "podman_base": [f"{dry['images']}/base.lock.json"],
        "podman_image": [f"{dry['images']}/pytorch-cuda.lock.json"],
    }, found
    assert not any(dry["images"].iterdir())


def test_pyxis_plans_the_squashfs_after_the_image(dry):
    result = run_block("pyxis", dry, dry=True)
    assert result.returncode == 0, result.output[-3000:]
    found = jobs(result.output)
    assert set(found) == {"podman_base", "podman_image", "pyxis_squashfs"}, found
    assert found["pyxis_squashfs"] == [f"{dry['images']}/pytorch-cuda.squashfs.lock.json"]


def test_prescreen_plans_one_job_per_shape_and_no_training(dry):
    result = run_block("prescreen", dry, dry=True)
    assert result.returncode == 0, result.output[-3000:]
    found = jobs(result.output)
    shapes = {rule for rule in found if rule.startswith("prescreen_")}
    assert shapes == {"prescreen_1x8", "prescreen_2x8", "prescreen_4x8"}
    assert not [rule for rule in found if rule.startswith("train_")]
    assert "slurm_partition=debug" in resources(result.output, "prescreen_4x8")


def test_run_plans_the_grids_twelve_training_jobs(dry):
    result = run_block("run", dry, dry=True)
    assert result.returncode == 0, result.output[-3000:]
    found = jobs(result.output)
    trained = {rule: len(outs) for rule, outs in found.items() if rule.startswith("train_")}
    assert trained == {"train_1x1": 3, "train_1x8": 3, "train_2x8": 3, "train_4x8": 3}


def test_apptainer_plans_the_sif_after_the_image(dry):
    result = run_block("apptainer", dry, dry=True)
    assert result.returncode == 0, result.output[-3000:]
    found = jobs(result.output)
    assert set(found) == {"podman_base", "podman_image", "apptainer_sif"}, found
    assert found["apptainer_sif"] == [f"{dry['images']}/pytorch-cuda.sif.lock.json"]


# ---------------------------------------------------------------- for real


def test_bootstrap_and_profile_install(tmp_path):
    paths = make_paths(tmp_path, venvs=REPO / ".venvs")
    result = run_block("bootstrap", paths)
    assert result.returncode == 0, result.output[-3000:]
    installed = paths["home"] / ".config/snakemake/slurm/config.yaml"
    assert installed.read_text() == (REPO / "profiles/slurm/config.yaml").read_text()
    # twice: the same result (cp -rT), no nested copy
    assert run_block("profile", paths).returncode == 0
    assert not (installed.parent / "slurm").exists()


def toy_environment_built() -> bool:
    stamp, lock = REPO / ".venvs/pytorch/.dlbench-env", REPO / "envs/pytorch.txt"
    return framework_python("pytorch").exists() and stamp.exists() and stamp.stat().st_mtime >= lock.stat().st_mtime


@pytest.mark.skipif(not toy_environment_built(), reason="the pytorch environment (the toy's numpy) is not built")
def test_envs_for_real_builds_nothing_present_and_trains_nothing(tmp_path):
    paths = make_paths(tmp_path, venvs=REPO / ".venvs")
    result = run_block("envs", paths, toy=True)
    assert result.returncode == 0, result.output[-3000:]
    assert re.search(r"^total\s+0$", result.output, re.M), result.output[-2000:]
    assert not (paths["work"] / "results/runs").exists()


def slurm_job_names(run_id: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-n", run_id, "-o", "%i"], capture_output=True, text=True, timeout=30)
    return out.stdout.split()


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """The page's `run`, SIGKILLed once its first training job has started, then `resume`."""
    if not cluster_answers():
        pytest.skip("no Slurm cluster answers (tools/slurm-local/up.sh)")
    if not toy_environment_built():
        pytest.skip("the pytorch environment (the toy's numpy) is not built")
    paths = make_paths(tmp_path_factory.mktemp("cluster-page"), venvs=REPO / ".venvs")
    runs = paths["work"] / "results/runs"
    log = paths["work"].parent / "run.log"
    with open(log, "w") as out:
        proc = run_block("run", paths, toy=True, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 180
        while not (started := sorted(runs.glob("**/slurm.json"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail(f"no training job started: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    run_id = re.search(r"SLURM run ID: (\S+)", log.read_text()).group(1)
    deadline = time.monotonic() + 180
    while slurm_job_names(run_id):
        assert time.monotonic() < deadline, f"jobs of {run_id} still queued"
        time.sleep(1)
    kept = {path: path.read_bytes() for path in runs.glob("**/launch.json")}
    again = run_block("run", paths, toy=True, timeout=120)  # without the page's resume
    result = run_block("resume", paths, toy=True, timeout=300)
    return {"paths": paths, "started": started, "kept": kept, "again": again, "result": result}


@pytest.mark.slurm
def test_resume_after_a_killed_controller_finishes_the_grid(resumed):
    result, work = resumed["result"], resumed["paths"]["work"]
    assert result.returncode == 0, result.output[-4000:]
    for scale, strategy in TOY_RUNS.items():
        run = work / f"results/runs/toy/resnet50/fp32/synthetic/bs4/{scale}/{strategy}/rep1"
        assert (run / "launch.json").exists(), run
    runs = pd.read_csv(work / "results/tables/runs.csv")
    assert len(runs) == 3 and set(runs["status"]) == {"ok"}, runs
    cells = pd.read_csv(work / "results/tables/cells.csv")
    assert len(cells) == 3 and set(cells["status"]) == {"ok"}, cells
    assert (work / "results/report/index.html").exists()
    # what the killed pipeline's jobs finished is kept byte for byte, nothing set aside
    assert resumed["kept"], "no job of the killed pipeline finished"
    for path, content in resumed["kept"].items():
        assert path.read_bytes() == content, path
    assert not list(work.glob("results/runs/**/attempt1"))


@pytest.mark.slurm
def test_the_killed_pipeline_is_refused_until_unlocked(resumed):
    again = resumed["again"]
    assert again.returncode != 0
    assert "is locked by a snakemake that is no longer running" in again.output, again.output[-3000:]


@pytest.mark.slurm
def test_audit_passes(resumed):
    result = run_block("audit", resumed["paths"], toy=True, timeout=180)
    assert result.returncode == 0, result.output[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "PASSED"


@pytest.mark.slurm
def test_archive_regenerates_byte_for_byte(resumed):
    paths = resumed["paths"]
    result = run_block("archive", paths, toy=True, timeout=120)
    assert result.returncode == 0, result.output[-3000:]
    assert "byte-identical to its regeneration" in result.output
    assert (paths["archive"] / "config/toy-grid.yaml").exists()
    assert not (paths["archive"] / "results/data").exists()
