"""Campaigns (#18): published numbers as result sets, and comparing two campaigns."""

import json
import math

import numpy as np
import pytest

from dlbench.analysis import tables
from dlbench.campaigns import compare as cmp
from dlbench.campaigns import load
from dlbench.campaigns.__main__ import main
from dlbench.campaigns.campaign import write_pipeline_manifest
from dlbench.campaigns.published import LLM_PUBLISHED, find, import_published, parse_statistic
from dlbench.planning.grid import Grid
from dlbench.steplog import StepLogWriter, read_steplog
from tests.conftest import REPO, make_coords, write_run

PUBLISHED = REPO / "config" / "references" / "published_throughput.csv"
PROTOCOL = {"preset": "test", "warmup_steps": 1, "measured_steps": 4, "repeats": 5, "statistic": "mean"}


def measured_campaign(root, step_seconds_per_repeat, scales=("1x1",)):
    """A pipeline working directory: rank logs written with the one step-log writer, then the
    tables made by the pipeline's own code (dlbench.analysis.tables)."""
    coords = []
    for scale in scales:
        for repeat, step in enumerate(step_seconds_per_repeat, start=1):
            c = make_coords(scale=scale, strategy="single" if scale == "1x1" else "ddp", repeat=repeat)
            ranks = int(scale.split("x")[1])
            write_run(root, c, [[1.0] + [step] * 4] * ranks, warmup=1)
            coords.append(c)
    write_tables(root, coords)
    return coords


def write_tables(root, coords):
    runs, cells = tables.build(Grid(runs=coords, unavailable={}, protocol=PROTOCOL), root)
    (root / "results" / "tables").mkdir(parents=True, exist_ok=True)
    (root / "results" / "tables" / "runs.csv").write_bytes(tables.csv_bytes(runs))
    (root / "results" / "tables" / "cells.csv").write_bytes(tables.csv_bytes(cells))
    write_pipeline_manifest(root, protocol=PROTOCOL)


def scaled_copy(source, target, coords, factor):
    """The same runs with every timestamp divided by `factor` (throughput × factor)."""
    for c in coords:
        for path in sorted((source / c.run_dir).glob("rank*.steps.jsonl")):
            log = read_steplog(path)
            header = {k: v for k, v in log.header.items() if k not in ("type", "schema")}
            writer = StepLogWriter(target / c.run_dir / path.name, header)
            writer.write_steps(
                [
                    {
                        **{k: v for k, v in s.items() if k != "type"},
                        "t_start": s["t_start"] / factor,
                        "t_end": s["t_end"] / factor,
                    }
                    for s in log.steps
                ]
            )
            writer.close(log.footer["status"], log.footer["error"])
    write_tables(target, coords)


# ------------------------------------------------------------------ published campaigns


def test_published_campaigns_regenerate_the_seeds_speedups_by_hand():
    campaigns = import_published(str(PUBLISHED))
    dgx1 = find(campaigns, "seed000-nvidia_dgx_1").cells.set_index(["model", "data", "batch", "scale"])
    # seed 000, DGX-1, ResNet-50 synthetic batch 64: 1734 images/s on 8 GPUs, 219 on one.
    assert dgx1.loc[("resnet50", "synthetic", "64", "1x8"), "speedup"] == pytest.approx(1734 / 219)
    assert dgx1.loc[("resnet50", "synthetic", "64", "1x8"), "efficiency"] == pytest.approx(1734 / 219 / 8)
    assert dgx1.loc[("vgg16", "real", "64", "1x4"), "speedup"] == pytest.approx(534 / 154)
    # seed 002: 4 nodes x 8 V100, fp32 batch 64, NCCL collective: 7617.47 over 261.33.
    paddle = find(campaigns, "seed002").cells.set_index(["precision", "batch", "scale", "strategy"])
    assert paddle.loc[("fp32", "64", "4x8", "fleet_collective_nccl"), "speedup"] == pytest.approx(7617.47 / 261.33)
    # seed 003: each strategy over its own 1-GPU number (parameter server: 1604.55 / 221.68).
    tensorpack = find(campaigns, "seed003-8x_tesla_p100").cells.set_index(["framework", "scale", "strategy"])
    assert tensorpack.loc[("tensorflow", "1x8", "parameter_server"), "speedup"] == pytest.approx(1604.55 / 221.68)
    assert tensorpack.loc[("tensorpack_fake_gpu", "1x8", "replicated"), "speedup"] == pytest.approx(1612 / 228)


def test_published_campaign_protocols_and_missing_sources():
    assert parse_statistic("median of 7 runs; skip 20 steps, mean of next 100") == {
        "statistic": "median",
        "repeats": 7,
        "warmup_steps": 20,
        "measured_steps": 100,
        "preset": None,
    }
    campaigns = import_published(str(PUBLISHED))
    assert len({c.id for c in campaigns}) == len(campaigns) == 7 + 2  # the seeds', then the LLM sources'
    with pytest.raises(KeyError, match="figures only"):
        find(campaigns, "caict2020")
    # Published against published: ratios, but no spread to state a confidence from.
    result = cmp.compare(find(campaigns, "seed000-nvidia_dgx_1"), find(campaigns, "seed000-google_compute"))
    dgx1_vs_k80 = result.cells.set_index(["model", "data", "batch", "scale"])
    assert dgx1_vs_k80.loc[("resnet50", "synthetic", "64", "1x8"), "ratio"] == pytest.approx(
        dgx1_vs_k80.loc[("resnet50", "synthetic", "64", "1x8"), "candidate"] / 1734
    )
    assert set(result.cells["verdict"]) == {"inconclusive"}
    assert result.cells["why"].str.startswith("no repeats on either side").all()
    assert result.cells["why"].str.endswith("cannot be decided by more repeats").all()
    assert [d["field"] for d in result.differences] == ["hardware.gpu"]


def test_published_llm_rows_are_campaigns_with_their_sources():
    campaigns = import_published(str(PUBLISHED))
    titan, nemo = find(campaigns, "torchtitan-nvidia_h100"), find(campaigns, "dgxc-benchmarking-nvidia_h100")
    assert "pytorch/torchtitan/blob/eaea6f6a2fa940f03a10906be1df3489cf30af85" in titan.manifest["source"]
    assert "dgxc-benchmarking/blob/143b90dd91f9be958fed4773ae95d941a3356a82" in nemo.manifest["source"]
    # bf16 is dlbench's LLM amp (the references' precision aliases); fp8 has no dlbench precision.
    titan_cells = titan.cells.set_index(["precision", "scale", "strategy"])["throughput"]
    assert titan_cells[("amp", "1x8", "fsdp")] == 5762 * 8  # Table 1: TPS/GPU x 8 GPUs
    assert titan_cells[("fp8", "16x8", "fsdp_compile_float8")] == 8380 * 128
    nemo_cells = nemo.cells.set_index(["precision", "scale"])["throughput"]
    assert nemo_cells[("amp", "1x8")] == 81222 and nemo_cells[("fp8", "16x8")] == 1708474
    assert set(titan.cells["model"]) == set(nemo.cells["model"]) == {"llama3_8b"}
    # LLM_PUBLISHED passed as the configured CSV is read once, not twice.
    assert len(import_published(LLM_PUBLISHED)) == 2


def test_published_tables_go_through_the_pipeline_markdown():
    dgx1 = find(import_published(str(PUBLISHED)), "seed000-nvidia_dgx_1")
    text = tables.markdown(dgx1.cells, {**PROTOCOL, "preset": "tf_cnn_benchmarks"})
    assert "|         1734 |" in text and "ResNet-50" in text


# ------------------------------------------------------------------ comparing


STEADY = [0.50, 0.501, 0.499, 0.5005, 0.4995]  # five repeats, CV ~0.1%


def test_a_campaign_compared_with_itself_is_the_same_everywhere(tmp_path):
    measured_campaign(tmp_path, STEADY, scales=("1x1", "1x2"))
    campaign = load(tmp_path)
    result = cmp.compare(campaign, campaign)
    assert len(result.cells) == 2 and result.comparable
    assert set(result.cells["verdict"]) == {"same"}
    assert result.cells["ratio"].tolist() == [1.0, 1.0]


def test_logs_scaled_to_0_8_are_slower_by_0_8(tmp_path):
    coords = measured_campaign(tmp_path / "a", STEADY, scales=("1x1", "1x2"))
    scaled_copy(tmp_path / "a", tmp_path / "b", coords, 0.8)
    result = cmp.compare(load(tmp_path / "a"), load(tmp_path / "b"))
    assert set(result.cells["verdict"]) == {"slower"}
    assert result.cells["ratio"].to_numpy() == pytest.approx([0.8, 0.8])
    assert (result.cells["ci95_high"] < 0.95).all() and (result.cells["p_value"] < 0.05).all()
    assert (result.cells["effect_size"] == -1).all()
    paths = cmp.write(result, tmp_path / "out")
    summary = json.loads(paths["summary"].read_text())
    assert summary["regression"] and summary["verdicts"]["slower"] == 2
    # The command: exit status 1 on a confident regression (for CI), 0 against itself.
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cli")]) == 1
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    assert (tmp_path / "cli" / "comparison.csv").read_bytes() == paths["cells"].read_bytes()


def test_two_noisy_repeats_are_inconclusive(tmp_path):
    measured_campaign(tmp_path / "a", [0.4, 0.6])
    measured_campaign(tmp_path / "b", [0.45, 0.7])
    result = cmp.compare(load(tmp_path / "a"), load(tmp_path / "b"))
    assert result.cells["verdict"].tolist() == ["inconclusive"]
    assert "too few repeats" in result.cells["why"].iloc[0]


def test_noisy_five_repeats_straddling_the_band_are_inconclusive(tmp_path):
    rng = np.random.default_rng(3)
    measured_campaign(tmp_path / "a", list(0.5 * (1 + 0.2 * rng.standard_normal(5))))
    measured_campaign(tmp_path / "b", list(0.5 * (1 + 0.2 * rng.standard_normal(5))))
    result = cmp.compare(load(tmp_path / "a"), load(tmp_path / "b"))
    assert result.cells["verdict"].tolist() == ["inconclusive"]
    cell = result.cells.iloc[0]
    low, high, ratio = cell["ci95_low"], cell["ci95_high"], cell["ratio"]
    crossed = [edge for edge in (0.95, 1.05) if low < edge < high]
    factor = max((((high - ratio) if e > ratio else (ratio - low)) / abs(e - ratio)) ** 2 for e in crossed)
    needed = math.ceil(5 * factor)
    assert cell["why"] == (
        f"the 95% CI crosses the ±5% band: about {needed} and {needed} repeats (now 5 and 5) "
        "to decide it, if the estimate holds"
    )
    assert "to decide it, if the estimate holds" in cmp.text(result)


def test_a_tight_interval_inside_the_band_is_the_same_and_a_wide_one_is_not(tmp_path):
    coords = measured_campaign(tmp_path / "a", STEADY)
    scaled_copy(tmp_path / "a", tmp_path / "b", coords, 1.02)  # 2% faster, every repeat alike: CI inside ±5%
    result = cmp.compare(load(tmp_path / "a"), load(tmp_path / "b"))
    assert result.cells["verdict"].tolist() == ["same"] and result.cells["ci95_high"].iloc[0] <= 1.05
    narrower = cmp.compare(load(tmp_path / "a"), load(tmp_path / "b"), tolerance=0.02)
    assert narrower.cells["verdict"].tolist() == ["inconclusive"]  # 1.02 sits on the ±2% edge
    assert narrower.cells["why"].iloc[0].endswith("cannot be decided by more repeats")


def test_measured_against_published_matches_every_coordinate_and_says_why_not(tmp_path):
    measured_campaign(tmp_path, STEADY, scales=("1x1", "1x2"))
    dgx1 = find(import_published(str(PUBLISHED)), "seed000-nvidia_dgx_1")
    result = cmp.compare(dgx1, load(tmp_path))
    assert result.cells.empty
    reasons = {u["cell"]: u["reason"] for u in result.unmatched}
    mine = "pytorch/resnet50/fp32/synthetic/8/1x2/ddp"
    assert "framework (pytorch vs tensorflow)" in reasons[mine] and "batch (8 vs" in reasons[mine]
    assert any(d["field"] == "protocol.warmup_steps" and d["blocking"] for d in result.differences)


def test_a_measured_cell_matching_a_published_one_gets_a_ratio_against_the_published_number(tmp_path):
    coords = [make_coords(framework="tensorflow", batch="64", repeat=r) for r in range(1, 6)]
    for c, step in zip(coords, STEADY, strict=True):
        write_run(tmp_path, c, [1.0] + [step] * 4, warmup=1, batch=64)  # ~128 images/s
    write_tables(tmp_path, coords)
    dgx1 = find(import_published(str(PUBLISHED)), "seed000-nvidia_dgx_1")
    result = cmp.compare(dgx1, load(tmp_path))
    cell = result.cells.set_index("scale").loc["1x1"]
    assert cell["reference"] == 219 and cell["n_reference"] == 1 and cell["n_candidate"] == 5
    assert cell["ratio"] == pytest.approx(load(tmp_path).cells["throughput"].iloc[0] / 219)
    assert cell["ci95_low"] < cell["ratio"] < cell["ci95_high"] < 0.95 and cell["verdict"] == "slower"
