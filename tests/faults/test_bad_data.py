"""Bad data inputs: each stops with one message naming the path, before anything is trained
where it can be known before (the config check Snakemake runs when it loads the workflow).

- `data.images.source` that is not an ImageNet layout (images, but no train/<wnid>/);
- a data directory that cannot be read (chmod 000, read by a process without the
  CAP_DAC_* capabilities that let root read anything);
- a converted dataset whose manifest was cut short (a full disk or a kill while it was
  copied): the run's rank stops naming the manifest instead of training on it.
"""

import shutil
import subprocess

import pytest

from dlbench.data import imagefolder, imagenet
from dlbench.steplog import read_steplog
from tests.conftest import REPO
from tests.test_config_validation import SNAKEMAKE
from tests.test_pytorch_runner import PYTHON, launch

pytestmark = pytest.mark.faults

SMALL = dict(count=8, classes=2, image_size=32, seed=1)
# Run as root minus the capabilities that bypass file permissions (a user's view of chmod 000).
WITHOUT_ROOT_READ = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def dry_run(workdir, source, prefix=()) -> list[str]:
    """`snakemake -n` of the default grid with data.images.source set on the command line; its
    'invalid config' lines."""
    (workdir / "config").mkdir(parents=True)
    shutil.copy(REPO / "config/config.yaml", workdir / "config/config.yaml")
    cmd = [*prefix, *SNAKEMAKE, "-n", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    cmd += ["--config", f"data={{images: {{source: {source}}}}}"]
    result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert not (workdir / "results").exists()
    return [line for line in (result.stderr + result.stdout).splitlines() if "invalid config" in line]


def test_a_source_that_is_not_an_imagenet_layout_is_named(tmp_path):
    flat = tmp_path / "photos"
    imagenet.generate(tmp_path / "generated", **SMALL)
    (tmp_path / "generated/train").rename(flat)  # <wnid>/*.JPEG without the train/ level
    assert dry_run(tmp_path / "work", flat) == [
        f"invalid config: --config: data.images.source: {flat / 'train'}: training image directory not found "
        "(expected <root>/train/<wnid>/*.JPEG)"
    ]


def test_an_unreadable_data_directory_is_named(tmp_path):
    source = tmp_path / "imagenet"
    imagenet.generate(source, **SMALL)
    (source / "train").chmod(0)
    try:
        if subprocess.run([*WITHOUT_ROOT_READ, "true"], capture_output=True).returncode != 0:
            pytest.skip("setpriv cannot drop capabilities here")
        lines = dry_run(tmp_path / "work", source, prefix=WITHOUT_ROOT_READ)
    finally:
        (source / "train").chmod(0o755)
    assert lines == [
        f"invalid config: --config: data.images.source: {source / 'train'}: "
        "cannot read this directory (Permission denied)"
    ]


@pytest.mark.skipif(not PYTHON.exists(), reason="the pytorch environment is not built")
def test_a_corrupt_converted_dataset_stops_the_run_naming_it(tmp_path):
    imagenet.generate(tmp_path / "imagenet", **SMALL)
    converted = tmp_path / "imagefolder"
    imagefolder.convert(tmp_path / "imagenet", converted, splits=["train"])
    manifest = converted / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:60])  # cut short
    run_dir = tmp_path / "run"
    result = launch(run_dir, "--data", "real", "--data-dir", str(converted), "--data-workers", "1", batch=2)
    expected = f"{manifest}: cannot be read as a dataset manifest"
    log = read_steplog(run_dir / "rank0.steps.jsonl")
    assert log.footer is not None and expected in log.footer["error"], (log.footer, result.stderr[-2000:])
    assert log.footer["status"] == "failed" and not log.steps  # nothing trained on it
