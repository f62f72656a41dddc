"""Apptainer recipes, the image lock, digest verification and the Snakemake wiring.

Apptainer itself is not installable here (neither Debian 12 nor PyPI has it), so nothing in
this file builds or runs an image. What is real: spython reading the recipes, sha256 of real
files standing in for .sif images, and Snakemake (dry runs, and one real run that must stop at
verification). Snakemake 9.27.1 asks `apptainer --version` as soon as --sdm apptainer is given,
even for a dry run; the Snakemake tests put a stand-in on PATH that answers exactly that and
refuses every other command, and check that nothing else was asked of it.
"""

import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlbench.images import apptainer as containers
from tests.conftest import REPO

LOCK = REPO / "containers" / "images.lock"
FRAMEWORKS = sorted(containers.load_lock(LOCK))
SNAKEFILE = REPO / "Snakefile"
INTEGRATED = 'include: "workflow/rules/containers.smk"' in SNAKEFILE.read_text()
needs_integration = pytest.mark.skipif(
    not INTEGRATED, reason="workflow/rules/containers.smk is not included in the Snakefile yet"
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fake_image(path: Path, content: bytes = b"SIF stand-in\n" * 4096) -> Path:
    """A real file where a .sif would be: verification only reads its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


# ------------------------------------------------------------------ recipes


def test_every_framework_has_a_recipe_and_a_pin():
    assert {"pytorch", "tensorflow", "mxnet"} <= set(FRAMEWORKS)
    for framework in FRAMEWORKS:
        assert (REPO / "containers" / f"{framework}.def").exists()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_recipe_parses_with_spython_and_carries_the_required_labels(framework):
    recipe = containers.parse_recipe(REPO / "containers" / f"{framework}.def")
    assert set(containers.REQUIRED_LABELS) <= set(recipe.labels)
    assert containers.DIGEST_REF.match(recipe.from_ref), recipe.from_ref
    pin = containers.pin_for(framework, LOCK)
    assert recipe.from_ref == pin.base == recipe.labels["DLBENCH_BASE_IMAGE"]
    assert recipe.labels["DLBENCH_ENV_LOCK_SHA256"] == sha256(REPO / "envs" / f"{framework}.txt")
    assert recipe.labels["DLBENCH_FRAMEWORK"] == framework
    assert (f"envs/{framework}.txt", f"/opt/dlbench/envs/{framework}.txt") in recipe.files
    assert containers.check_recipe(pin) == []


def test_check_command_passes_on_the_repository():
    result = subprocess.run(
        [sys.executable, "-m", "dlbench.images.apptainer", "check"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "recipes OK" in result.stdout


def _edited_recipe(tmp_path, framework, edit) -> Path:
    text = (REPO / "containers" / f"{framework}.def").read_text()
    path = tmp_path / f"{framework}.def"
    path.write_text(edit(text))
    return path


def test_a_moved_env_lock_fails_the_check(tmp_path):
    old = sha256(REPO / "envs" / "pytorch.txt")
    path = _edited_recipe(tmp_path, "pytorch", lambda t: t.replace(old, "0" * 64))
    problems = containers.check_recipe(containers.pin_for("pytorch", LOCK), recipe=path)
    assert len(problems) == 1
    assert "DLBENCH_ENV_LOCK_SHA256" in problems[0] and old in problems[0] and "0" * 64 in problems[0]


def test_an_extra_package_must_be_the_version_the_lock_pins(tmp_path):
    locked = containers.locked_versions(REPO / "envs" / "pytorch.txt")["transformers"]
    path = _edited_recipe(tmp_path, "pytorch", lambda t: t.replace(f"transformers=={locked}", "transformers==0.0.1"))
    problems = containers.check_recipe(containers.pin_for("pytorch", LOCK), recipe=path)
    assert any(f"installs transformers==0.0.1 but envs/pytorch.txt pins transformers=={locked}" in p for p in problems)


def test_a_missing_label_and_a_tag_only_base_fail_the_check(tmp_path):
    def edit(text):
        text = re.sub(r"(?m)^\s*DLBENCH_VERSION .*\n", "", text)
        return re.sub(r"(?m)^From: .*$", "From: nvcr.io/nvidia/pytorch:26.08-py3", text)

    path = _edited_recipe(tmp_path, "pytorch", edit)
    problems = " | ".join(containers.check_recipe(containers.pin_for("pytorch", LOCK), recipe=path))
    assert "missing labels DLBENCH_VERSION" in problems
    assert "not pinned by digest" in problems
    assert "differs from images.lock base" in problems


def test_a_line_spython_would_misread_is_refused(tmp_path):
    path = _edited_recipe(tmp_path, "mxnet", lambda t: t + "\n%help\n    Built from: somewhere\n")
    with pytest.raises(containers.ContainerError, match="spython reads as a header"):
        containers.parse_recipe(path)


def test_building_is_refused_until_someone_checks_the_base_digest():
    for framework in FRAMEWORKS:
        pin = containers.pin_for(framework, LOCK)
        problems = containers.build_problems(pin)
        if pin.base_digest_checked:
            assert problems == []
        else:
            assert any("nobody has checked it against the registry" in p for p in problems), problems
            assert containers.build_problems(dataclasses.replace(pin, base_digest_checked=True)) == []


def test_stage_holds_exactly_what_the_recipe_copies(tmp_path):
    recipe_path = containers.stage("mxnet", tmp_path / "build", LOCK)
    recipe = containers.parse_recipe(recipe_path)
    for source, _ in recipe.files:
        assert (recipe_path.parent / source).exists(), source
    info = json.loads((recipe_path.parent / "BUILD_INFO.json").read_text())
    assert info["framework"] == "mxnet" and info["base"] == recipe.from_ref
    assert not list((recipe_path.parent / "dlbench").rglob("__pycache__"))


# ------------------------------------------------------------------ digests


@pytest.fixture
def lock_copy(tmp_path) -> Path:
    path = tmp_path / "images.lock"
    shutil.copy2(LOCK, path)
    return path


def test_pin_then_verify_a_real_file(tmp_path, lock_copy):
    image = fake_image(tmp_path / "images" / "pytorch.sif")
    containers.set_pinned_sha256("pytorch", sha256(image), lock_copy)
    assert "NOBODY HAS CHECKED" in lock_copy.read_text()  # comments survive the rewrite
    assert containers.pin_for("pytorch", lock_copy).sif_sha256 == sha256(image)
    assert containers.pin_for("tensorflow", lock_copy).sif_sha256 == ""
    record = tmp_path / "record.json"
    result = containers.verify_image("pytorch", image, lock_copy, record)
    assert result["sha256"] == sha256(image)
    assert json.loads(record.read_text())["image"] == str(image.resolve())


def run_verify_script(*args):
    return subprocess.run(
        [sys.executable, str(REPO / "workflow/scripts/verify_image.py"), *map(str, args)],
        capture_output=True,
        text=True,
    )


def test_wrong_digest_stops_with_an_error_naming_the_image_and_both_digests(tmp_path, lock_copy):
    image = fake_image(tmp_path / "pytorch.sif")
    pinned = hashlib.sha256(b"the image that was pinned").hexdigest()
    containers.set_pinned_sha256("pytorch", pinned, lock_copy)
    record = tmp_path / "record.json"
    result = run_verify_script("--framework", "pytorch", "--image", image, "--lock", lock_copy, "--record", record)
    assert result.returncode == 1
    assert str(image) in result.stderr
    assert sha256(image) in result.stderr and pinned in result.stderr
    assert not record.exists()


def test_an_unpinned_image_is_refused_and_the_error_says_how_to_pin(tmp_path, lock_copy):
    image = fake_image(tmp_path / "tensorflow.sif")
    result = run_verify_script("--framework", "tensorflow", "--image", image, "--lock", lock_copy)
    assert result.returncode == 1
    assert "no sha256 is pinned" in result.stderr and sha256(image) in result.stderr
    assert "python -m dlbench.images.apptainer pin tensorflow" in result.stderr


def test_the_matching_digest_passes_the_script(tmp_path, lock_copy):
    image = fake_image(tmp_path / "mxnet.sif")
    containers.set_pinned_sha256("mxnet", sha256(image), lock_copy)
    result = run_verify_script("--framework", "mxnet", "--image", image, "--lock", lock_copy)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------ Snakemake


def apptainer_stand_in(bin_dir: Path, log: Path) -> Path:
    """Answers `apptainer --version` (Snakemake's only question in a dry run); refuses the rest."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "apptainer"
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'if [ "$1" = "--version" ]; then echo "apptainer version 1.3.6"; exit 0; fi\n'
        'echo "apptainer stand-in: no Apptainer on this machine; refusing: apptainer $*" >&2\n'
        "exit 1\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


GRID = {
    "grid": {
        "frameworks": ["pytorch", "tensorflow", "mxnet"],
        "models": ["resnet50"],
        "batch_per_device": [8],
        "scales": ["1x1", "1x2"],
        "strategies": {"pytorch": ["ddp"], "tensorflow": ["multi_worker_mirrored"], "mxnet": ["dist_sync"]},
    },
    "protocol": {"preset": "caict2020", "warmup_steps": 1, "measured_steps": 2, "repeats": 1},
    "run": {"image_size": 64},
}


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(GRID))
    # The directory's own config: without one the Snakefile reads the embedded default's grid too.
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(GRID))
    return tmp_path


def snakemake(workdir, *args, env=None):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(workdir)]
    cmd += ["--configfile", str(workdir / "grid.yaml"), "--cores", "1", *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600, env=env)


def with_stand_in(workdir, **extra):
    log = workdir / "apptainer-calls.log"
    apptainer_stand_in(workdir / "bin", log)
    env = dict(os.environ, PATH=f"{workdir / 'bin'}{os.pathsep}{os.environ['PATH']}", **extra)
    return env, log


def jobs(output: str, rule: str) -> list[dict]:
    """The `rule NAME:` blocks of a dry run, as {field: text}."""
    found = []
    for block in re.split(r"\n(?=rule \w+:)", output):
        if re.match(rf"rule {rule}:", block):
            fields = dict(re.findall(r"(?m)^    (\w+): (.*)$", block))
            found.append(fields)
    return found


@needs_integration
def test_dry_run_with_apptainer_lists_the_right_image_for_every_training_job(workdir):
    env, calls = with_stand_in(workdir)
    result = snakemake(workdir, "runs", "-n", "--sdm", "apptainer", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    train = jobs(out, r"train_\w+")
    assert len(train) == 6
    for job in train:
        framework = re.search(r"framework=(\w+)", job["wildcards"]).group(1)
        inputs = [s.strip() for s in job["input"].split(",")]
        assert inputs[0].endswith(f"/{framework}.sif"), job
        assert inputs[1] == f"results/containers/{framework}.image.json", job
        assert not [s for s in inputs if s.endswith(".sif") and not s.endswith(f"/{framework}.sif")]
    verify = jobs(out, "verify_image")
    assert sorted(re.search(r"framework=(\w+)", j["wildcards"]).group(1) for j in verify) == sorted(FRAMEWORKS)
    assert set(calls.read_text().split("\n")) <= {"--version", ""}  # nothing was run by the stand-in


@needs_integration
def test_srun_launcher_in_an_image_is_refused_up_front(workdir):
    env, _ = with_stand_in(workdir)
    (workdir / "grid.yaml").write_text(yaml.safe_dump(dict(GRID, run={"launcher": "srun"})))
    result = snakemake(workdir, "runs", "-n", "--sdm", "apptainer", env=env)
    assert result.returncode != 0
    assert "run.launcher: srun does not work inside an Apptainer image" in result.stdout + result.stderr


@needs_integration
def test_local_default_keeps_the_venvs(workdir):
    result = snakemake(workdir, "-n", "runs")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert ".sif" not in out and "verify_image" not in out
    for job in jobs(out, r"train_\w+"):  # its venv's stamp, or nothing where the venv is built
        assert job.get("input", ".dlbench-env").endswith(".dlbench-env"), job


@needs_integration
def test_a_wrong_digest_in_the_lock_stops_the_run_before_any_training(workdir, tmp_path):
    images = tmp_path / "images"
    image = fake_image(images / "pytorch.sif")
    lock = tmp_path / "images.lock"
    shutil.copy2(LOCK, lock)
    pinned = hashlib.sha256(b"another build").hexdigest()
    containers.set_pinned_sha256("pytorch", pinned, lock)
    env, calls = with_stand_in(workdir, DLBENCH_IMAGES=str(images), DLBENCH_IMAGES_LOCK=str(lock))
    grid = dict(GRID, grid=dict(GRID["grid"], frameworks=["pytorch"], scales=["1x1"], strategies={}))
    (workdir / "grid.yaml").write_text(yaml.safe_dump(grid))
    result = snakemake(workdir, "runs", "--sdm", "apptainer", env=env)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "Error in rule verify_image" in out
    assert str(image) in out and sha256(image) in out and pinned in out
    assert not list((workdir / "results").rglob("launch.json"))
    assert set(calls.read_text().split("\n")) <= {"--version", ""}


def test_a_recipe_without_the_allocators_fails_the_check(tmp_path):
    path = _edited_recipe(tmp_path, "mxnet", lambda t: t.replace(" libtcmalloc-minimal4", ""))
    problems = containers.check_recipe(containers.pin_for("mxnet", LOCK), recipe=path)
    assert problems == [
        f"mxnet ({path}): %post must install libtcmalloc-minimal4 (the allocators run.allocator preloads)"
    ]
