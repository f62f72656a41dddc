"""Fit before launch (dlbench/planning/fit.py): the estimate's terms move as the strategy and
the sizes say, the GPU campaign's measured peak is within the stated error, and a cell that
cannot fit is an N/A cell with both figures before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlbench.planning import config as dlbench_config
from dlbench.planning import fit

REPO = Path(__file__).resolve().parent.parent
H200_RUN = "campaigns/h200-llama1b-2026-11-27/results/runs/pytorch/llama3_1b/amp/synthetic/bs4/1x1/single/rep1"
GIB = fit.GIB


def estimate(model="llama_small", precision="fp32", batch=2, seq=512, sharding=None, device="cpu"):
    return fit.estimate_bytes(model, precision, fit.StepShape(batch, seq), sharding or fit.Sharding(1), device)


def test_sharding_the_state_and_splitting_the_blocks_shrink_what_a_rank_holds():
    single, ddp = estimate(), estimate(sharding=fit.Sharding.of("1x2", False, False))
    fsdp = estimate(sharding=fit.Sharding.of("1x2", False, True))
    tp = estimate(model="llama3_8b", precision="amp", sharding=fit.Sharding.of("1x8", True, True))
    fsdp8 = estimate(model="llama3_8b", precision="amp", sharding=fit.Sharding.of("1x8", False, True))
    assert fsdp["total"] < single["total"] < ddp["total"]
    assert fsdp["state"] == pytest.approx(single["state"] / 2) and ddp["reduced_gradients"] > 0
    assert tp["activations"] < fsdp8["activations"] and tp["logits"] == fsdp8["logits"]  # the head stays whole
    # at one node fsdp_tp has one data-parallel rank: its blocks split 8 ways, nothing sharded
    assert fit.Sharding.of("1x8", True, True).state_shards == 1 and fit.Sharding.of("2x8", True, True).state_shards == 2


def test_tokens_grow_activations_and_logits_and_amp_halves_them_but_adds_casts():
    short, long = estimate(seq=256), estimate(seq=512)
    assert long["activations"] == pytest.approx(2 * short["activations"]) and long["state"] == short["state"]
    amp = estimate(precision="amp")
    assert amp["casts"] > 0 and amp["logits"] < estimate()["logits"] and amp["activations"] < estimate()["activations"]
    assert estimate(device="cuda")["runtime"] == fit.CUDA_RUNTIME_GIB * GIB


def test_the_gpu_campaigns_measured_peak_is_within_the_stated_error():
    """PyTorch on the lent H200: the estimate's tensors within 10 % of the allocator's peak."""
    footer = json.loads((REPO / H200_RUN / "rank0.steps.jsonl").read_text().splitlines()[-1])
    measured = footer["device_memory"]["peak_bytes"]
    terms = estimate(model="llama3_1b", precision="amp", batch=4, seq=2048, device="cuda")
    tensors = terms["total"] - terms["runtime"]
    assert 1.0 <= tensors / measured < 1.10, (tensors / GIB, measured / GIB)


def llm_config(**run) -> dict:
    """config/grids/llm.yaml over the default, merged as Snakemake merges a --configfile."""
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "config/grids/llm.yaml").read_text()))
    config["run"].update(run)
    return config


def test_a_cell_that_cannot_fit_is_na_with_the_estimate_and_the_device():
    """config/grids/llm.yaml: activation checkpointing none and full, one global batch of 32."""
    grid = dlbench_config.checked_grid(llm_config(device_memory_gib=60))
    reasons = {
        (c.strategy + c.training, c.scale): why for c, why in grid.unavailable.items() if c.framework == "pytorch"
    }
    assert "needs ≈ 113.5 GiB per rank" in reasons[("fsdp+ga4", "1x8")]
    assert "the device has 60 GiB" in reasons[("fsdp+ga4", "1x8")]
    fits = {(r.strategy + r.cell.training, r.scale) for r in grid.runs if r.framework == "pytorch"}
    # checkpointing every block makes FSDP fit where accumulation does not hold whole gradients
    assert ("fsdp+ac_full", "4x8") in fits and ("fsdp+ac_full+ga4", "1x8") not in fits
    assert ("fsdp_tp+ga2", "2x8") in fits and ("fsdp_tp+ga4", "1x8") not in fits
    assert not dlbench_config.checked_grid(llm_config(device_memory_gib=200)).unavailable
    # the device's memory from its type; an unknown type refuses nothing
    h100 = dlbench_config.checked_grid(llm_config(gpu_type="h100")).unavailable
    assert {c.training for c in h100 if c.framework == "pytorch"} == {"+ga4", "+ga2"}
    assert any("the device has 79.6 GiB" in why for why in h100.values())
    assert not dlbench_config.checked_grid(llm_config(gpu_type="b300")).unavailable


def test_checkpointing_shrinks_the_estimate_and_fsdp_accumulation_holds_whole_gradients():
    """What a rank keeps for backward: full < selective < none; FSDP2 keeps unsynced gradients whole."""
    from dlbench import llm
    from dlbench.coords import CellKey

    def cell(mode="none", accum=1):
        return CellKey("pytorch", "llama3_8b", "amp", "synthetic", "1", "1x8", "fsdp", mode, accum)

    none, selective, full = (fit.cell_estimate_gib(cell(m), 8192, "cuda") for m in ("none", "selective", "full"))
    assert full < selective < none
    # accumulating, FSDP2 holds each gradient whole until the last micro-batch reduce-scatters it
    unsynced = fit.cell_estimate_gib(cell("full", 4), 8192, "cuda") - full
    assert unsynced == pytest.approx(4 * llm.parameter_count("llama3_8b") * 7 / 8 / fit.GIB, rel=0.01)
    assert fit.cell_estimate_gib(cell("full"), 8192, "cpu") == pytest.approx(full - fit.CUDA_RUNTIME_GIB)


def test_the_default_cpu_grid_is_never_refused_without_a_device_memory():
    base = yaml.safe_load((REPO / "config/config.yaml").read_text())
    assert not any("does not fit" in why for why in dlbench_config.checked_grid(base).unavailable.values())


def test_a_dry_run_lists_the_cells_that_cannot_fit(tmp_path):
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)]
    cmd += [
        "--configfile",
        str(REPO / "config/grids/llm.yaml"),
        "--config",
        "run={device_memory_gib: 40, memory_estimate: formula}",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr  # Snakemake's log goes to stdout without a terminal
    assert "18 cell(s) N/A before anything runs" in said
    # One line per reason, then its cells.
    assert "2 cells: does not fit: needs ≈ 113.5 GiB per rank" in said
    assert (
        "(jax llama3_8b amp synthetic bs1 1x8 mesh_fsdp+ga4; pytorch llama3_8b amp synthetic bs1 1x8 fsdp+ga4)" in said
    )
