"""The measured campaigns committed under campaigns/ (docs/campaigns.md): each regenerates byte
for byte from its raw logs, and the GPU ones (benchmarks/device_run.sh on a lent H100, and the
LLM line on a lent H200) hold what a CUDA run must record (docs/gpu.md)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from dlbench import labels
from dlbench.report.regenerate import check_campaign
from tests.conftest import REPO

# A campaign is a folder with config/ and results/; a device session's parts are folders of one.
CAMPAIGNS = sorted(p.parent for p in (REPO / "campaigns").glob("**/config") if (p.parent / "results").is_dir())
GPU = REPO / "campaigns" / "h100-resnet50-2026-11-26"
LLM_GPU = REPO / "campaigns" / "h200-llama1b-2026-11-27"


def test_there_is_a_committed_gpu_campaign():
    assert GPU in CAMPAIGNS and LLM_GPU in CAMPAIGNS


@pytest.mark.parametrize("campaign", CAMPAIGNS, ids=[p.name for p in CAMPAIGNS])
def test_a_committed_campaign_regenerates_byte_for_byte(campaign):
    assert check_campaign(campaign) == []


def rank_logs(campaign: Path) -> list[tuple[dict, dict]]:
    """(header, footer) of every rank log."""
    logs = []
    for path in sorted((campaign / "results" / "runs").rglob("rank*.steps.jsonl")):
        lines = path.read_text().splitlines()
        logs.append((json.loads(lines[0]), json.loads(lines[-1])))
    return logs


def test_the_gpu_runs_record_their_clock_their_energy_and_the_gpu():
    logs = rank_logs(GPU)
    assert len(logs) == 12  # PyTorch and JAX x fp32/AMP x 3 repeats
    for header, footer in logs:
        assert header["device"] == "cuda" and "H100" in header["framework"]["device_name"]
        assert header["provenance"]["site_environment"]["distributions_sha256"]
        energy = footer["energy"]
        assert footer["status"] == "ok" and energy["measured"] and not energy["too_short"]
        assert energy["joules"] > 0 and "H100" in energy["devices"][0]["name"]
        if header["run"]["framework"] == "pytorch":  # CUDA events, the queue drained at the window's ends
            assert header["sync"] == "window" and "torch.cuda.Event" in header["clock"]


def test_the_gpu_cells_carry_energy_mfu_with_its_peak_and_the_site_mark():
    cells = pd.read_csv(GPU / "results" / "tables" / "cells.csv")
    assert len(cells) == 4 and (cells["status"] == "ok").all()
    assert cells["joules_per_sample"].between(0.01, 10).all() and cells["avg_power_w"].between(50, 1000).all()
    assert cells["mfu"].between(0.01, 1).all() and cells["peak_basis"].str.contains("H100").all()
    assert (cells["python_env"] == "site").all()
    table = (GPU / "results" / "tables" / "cells.md").read_text()
    assert f"{labels.SITE_ENV_MARK} = {labels.SITE_ENV_TEXT}" in table


def test_the_llm_gpu_runs_record_window_clocks_energy_memory_and_the_gpu():
    """Llama 3.2 1B on the H200: both frameworks' finished runs timed without draining the queue
    every step (PyTorch: CUDA events; JAX: each loss's ready time), with NVML joules and the
    peak device memory; the run the stage's time limit cancelled is kept, marked."""
    finished = {"pytorch": 0, "jax": 0}
    for header, footer in rank_logs(LLM_GPU):
        assert header["run"]["model"] == "llama3_1b" and header["seq_len"] == 2048
        if footer["status"] == "cancelled":
            assert "SIGTERM" in footer["error"]
            continue
        framework = header["run"]["framework"]
        finished[framework] += 1
        assert footer["status"] == "ok" and header["framework"]["device_name"] == "NVIDIA H200"
        clock = "torch.cuda.Event" if framework == "pytorch" else "when each step's loss is ready"
        assert header["sync"] == "window" and clock in header["clock"]
        energy = footer["energy"]
        assert energy["measured"] and not energy["too_short"] and "H200" in energy["devices"][0]["name"]
        memory = footer["device_memory"]
        assert 20 * 2**30 < memory["peak_bytes"] < memory["limit_bytes"]  # 1.24 B parameters' fp32 AdamW state: 20 GB
    assert finished == {"pytorch": 1, "jax": 2}
    assert "TIMED OUT" in (LLM_GPU / "stages.txt").read_text()
    cells = pd.read_csv(LLM_GPU / "results" / "tables" / "cells.csv")
    assert cells["mfu"].between(0.2, 0.5).all() and cells["peak_basis"].str.contains("H200").all()


LLM_CAMPAIGN = REPO / "campaigns" / "h200-llama1b-2026-11-28"


def test_the_llm_campaign_holds_three_repeats_of_eager_compiled_and_jax_and_the_ac_rows():
    """The complete Llama 3.2 1B campaign on the H200 (three pipelines of one device session):
    3 repeats per cell of PyTorch eager, PyTorch compiled and JAX on cuDNN's attention, each
    with its MFU; PyTorch compiled past 40 %; checkpointing's measured peaks below none's."""
    parts = {
        name: pd.read_csv(LLM_CAMPAIGN / name / "results" / "tables" / "cells.csv")
        for name in ("pipeline", "compiled", "memory")
    }
    eager, compiled, memory = parts["pipeline"], parts["compiled"], parts["memory"]
    for cells in parts.values():
        assert (cells["status"] == "ok").all() and cells["peak_basis"].str.contains("H200").all()
    for cells in (eager, compiled):
        assert (cells["n"] == 3).all()
    assert set(eager["framework"]) == {"pytorch", "jax"} and set(compiled["framework"]) == {"pytorch"}
    assert compiled["mfu"].iloc[0] >= 0.40
    none = eager.set_index("framework").loc["pytorch", "peak_memory_gib"]
    assert set(memory["activation_checkpointing"]) == {"selective", "full"}
    assert (memory["peak_memory_gib"] < none).all()
    for header, _ in rank_logs(LLM_CAMPAIGN / "pipeline"):
        if header["run"]["framework"] == "jax":  # says which attention ran, and where its start-up went
            assert "cudnn" in header["framework"]["attention"] and header["framework"]["initial_state_seconds"] > 0
        assert set(header["framework"]["setup_seconds"]) == {"import_framework", "build"}


def test_the_compiled_profile_ranks_the_gpu_kernels():
    profiles = pd.read_csv(LLM_CAMPAIGN / "compiled" / "results" / "tables" / "profiles.csv")
    assert len(profiles) == 10 and profiles["operation"].str.contains("nvjet|sdpa|triton|cunn").all()
    assert "Profiles" in (LLM_CAMPAIGN / "compiled" / "results" / "report" / "index.html").read_text()
