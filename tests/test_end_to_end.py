"""The whole pipeline on a tiny grid: Snakemake → runs → tables → figures → report (the
session's one run, tests/tiny_pipeline.py)."""

import json
import shutil

import pandas as pd
import pytest

from tests.conftest import REPO, framework_python
from tests.tiny_pipeline import snakemake

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the pytorch environment is not built"),
]


@pytest.fixture(scope="module")
def finished(tiny_pipeline):
    return tiny_pipeline


def test_report_tables_and_figures_exist(finished):
    for path in [
        "results/report/index.html",
        "results/tables/cells.md",
        "results/figures/throughput.png",
        "results/figures/speedup.png",
        "results/figures/real_vs_synthetic.png",
    ]:
        assert (finished / path).stat().st_size > 0, path
    html = (finished / "results/report/index.html").read_text()
    assert "mlperf" in html and "data:image/png;base64," in html


def test_cells_have_numbers_speedup_and_the_unavailable_cell(finished):
    cells = pd.read_csv(finished / "results/tables/cells.csv", dtype={"batch": str})
    horovod = cells[cells["strategy"] == "horovod"]
    assert len(horovod) == 2 and set(horovod["status"]) == {"unavailable"}
    assert horovod["reason"].str.contains("Horovod").all()
    for data in ("synthetic", "real"):
        resnet = cells[(cells["data"] == data) & (cells["strategy"] != "horovod")].set_index("scale")
        assert (resnet["status"] == "ok").all(), resnet["reason"]
        assert (resnet["n"] == 2).all() and (resnet["throughput"] > 0).all()
        assert resnet.loc["1x1", "speedup"] == pytest.approx(1.0)
        assert resnet.loc["1x2", "efficiency"] == pytest.approx(resnet.loc["1x2", "speedup"] / 2)
    runs = pd.read_csv(finished / "results/tables/runs.csv")
    assert len(runs) == 2 * 2 * 2


def test_real_data_cells_compare_with_synthetic_and_show_the_data_wait(finished):
    cells = pd.read_csv(finished / "results/tables/cells.csv", dtype={"batch": str})
    real = cells[(cells["data"] == "real") & (cells["status"] == "ok")]
    assert len(real) == 2
    assert (real["real_vs_synthetic"] > 0).all()
    assert ((real["data_wait_fraction"] >= 0) & (real["data_wait_fraction"] < 1)).all()
    log = next((finished / "results/runs/pytorch/resnet50/fp32/real").rglob("rank1.steps.jsonl"))
    steps = [line for line in log.read_text().splitlines() if '"type":"step"' in line.replace(" ", "")]
    assert steps and all('"data_wait"' in line for line in steps)
    header = json.loads(log.read_text().splitlines()[0])
    assert header["framework"]["input_pipeline"].startswith("DataLoader(ImageFolder")  # PyTorch's own format
    manifest = json.loads(next((finished / "results/data/imagefolder").rglob("manifest.json")).read_text())
    assert manifest["format"] == "imagefolder"
    html = (finished / "results/report/index.html").read_text()
    assert "Synthetic vs real data" in html and "real ÷ synthetic" in html
    assert "Synthetic vs real data" in (finished / "results/tables/cells.md").read_text()


def test_second_invocation_is_a_no_op(finished):
    result = snakemake(finished, "-n")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_snakemake_report_bundle(finished):
    result = snakemake(finished, "--report", str(finished / "bundle.html"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (finished / "bundle.html").stat().st_size > 10_000


def test_audit_passes_on_fresh_results(finished):
    result = snakemake(finished, "-f", "audit")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (finished / "results/audit/verdict.txt").read_text().startswith("PASSED")
    manifest = (finished / "results/audit/manifest.json").read_text()
    assert "rank1.steps.jsonl" in manifest


@pytest.fixture(scope="module")
def archive(finished, tmp_path_factory):
    """Only the raw logs (and the config) of the finished grid, somewhere else."""
    copy = tmp_path_factory.mktemp("archive")
    shutil.copytree(finished / "results/runs", copy / "results/runs")
    shutil.copytree(finished / "config", copy / "config")
    shutil.copy(finished / "tiny.yaml", copy / "tiny.yaml")
    return copy


def test_report_regenerates_from_an_archive_of_raw_logs_without_training(archive):
    dry = snakemake(archive, "-n")
    assert "train" not in dry.stdout.split("Job stats")[1].split("Reasons")[0]
    result = snakemake(archive)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (archive / "results/report/index.html").exists()
    assert snakemake(archive, "-f", "audit").returncode == 0


def test_tampered_raw_log_fails_the_audit_naming_the_file(archive):
    log = next((archive / "results/runs").rglob("rank0.steps.jsonl"))
    log.chmod(0o644)
    log.write_text(log.read_text().replace('"samples":2', '"samples":3', 1))
    result = snakemake(archive, "-f", "audit")
    assert result.returncode != 0
    relative = str(log.relative_to(archive))
    assert relative in (archive / "logs/audit.log").read_text()


def pipeline_config(workdir) -> dict:
    """The config the pipeline ran with: tiny.yaml alone (a grid file is the whole experiment),
    the schema's defaults filled."""
    from dlbench.planning.config import resolve_files

    return resolve_files([str(workdir / "tiny.yaml")])


def test_regenerating_from_the_raw_logs_elsewhere_gives_the_pipelines_files_byte_for_byte(finished, tmp_path):
    """The one derivation (dlbench.analysis.derive): the campaign regenerated in another
    directory, from a copy of the raw logs and the pipeline's FLOPs counts, is the pipeline's
    tables, campaign manifest and references byte for byte (its cells keep their TFLOP/s)."""
    from dlbench.analysis.derive import flops_counts
    from dlbench.planning import grid, summary
    from dlbench.report.regenerate import output_paths, regenerate

    config = pipeline_config(finished)
    flops = flops_counts(sorted((finished / "results/flops").glob("*.json")))
    assert flops, "the pipeline counted FLOPs"
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(finished / "results/runs", elsewhere / "results/runs")
    planned = summary.planned_record(grid.expand(config), config, [str(finished / "tiny.yaml")], None, str(REPO))
    line = (finished / "tiny.yaml").read_text().splitlines().index("  image_size: 32") + 1
    assert {"setting": "run.image_size", "value": 32, "origin": f"tiny.yaml:{line}"} in planned["settings"]
    made = regenerate(grid.expand(config), elsewhere, tmp_path / "out", config, flops=flops, planned=planned)
    pipeline = output_paths(finished)
    for name in ("runs.csv", "cells.csv", "cells.md", "environment.json", "campaign.json", "references.csv"):
        assert made[name].read_bytes() == pipeline[name].read_bytes(), name
    cells = pd.read_csv(made["cells.csv"])
    assert cells.loc[cells["status"] == "ok", "tflops"].gt(0).all()
