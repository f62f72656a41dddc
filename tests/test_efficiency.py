"""Energy per sample, average power and MFU's basis (dlbench.analysis.efficiency): the arithmetic."""

import math
import types

import pandas as pd
import pytest

from dlbench import devices
from dlbench.analysis import efficiency, tables


def _log(energy, device_name="NVIDIA H100 80GB HBM3"):
    footer = {"status": "ok"} | ({} if energy is None else {"energy": energy})
    return types.SimpleNamespace(footer=footer, header={"framework": {"device_name": device_name}})


def _measured(joules, window_s, too_short=False):
    return {
        "measured": True,
        "method": "nvmlDeviceGetTotalEnergyConsumption",
        "refresh_s": 0.1,
        "window_s": window_s,
        "joules": joules,
        "devices": [{"name": "NVIDIA H100 80GB HBM3", "joules": joules}],
        "too_short": too_short,
    }


@pytest.mark.parametrize(
    "name,precision,expected",
    [
        ("NVIDIA H100 80GB HBM3", "fp32", 494.7),  # fp32 runs use TF32 tensor cores
        ("NVIDIA H100 PCIe", "amp", 756.0),
        ("NVIDIA A100-SXM4-80GB", "amp", 312.0),
        ("Tesla V100-SXM2-32GB", "fp32", 15.7),  # no TF32 on Volta
        ("Tesla V100-PCIE-16GB", "amp", 112.0),
        ("NVIDIA H200", "amp", 989.4),
    ],
)
def test_peak_by_gpu_and_precision(name, precision, expected):
    value, basis = devices.peak(name, precision)
    assert value == expected and name in basis and "dense" in basis
    assert devices.peak("cpu", precision) is None


def test_run_energy_sums_ranks_and_divides_by_samples_and_the_longest_window():
    row = efficiency.run_energy([_log(_measured(300.0, 2.0)), _log(_measured(100.0, 2.5))], samples=800)
    assert row["energy_j"] == 400.0 and row["joules_per_sample"] == 0.5
    assert row["avg_power_w"] == pytest.approx(160.0) and row["energy_note"] == ""
    short = efficiency.run_energy([_log(_measured(10.0, 0.5, too_short=True))], samples=10)
    assert short["joules_per_sample"] == 1.0 and "too short" in short["energy_note"]


def test_run_energy_not_measured_keeps_the_reason():
    reason = "the run is on the CPU; NVML: NVML library not found (libnvidia-ml.so.1: cannot open)"
    row = efficiency.run_energy([_log({"measured": False, "reason": reason}, device_name="cpu")], samples=8)
    assert math.isnan(row["joules_per_sample"]) and row["energy_note"] == f"not measured: {reason}"
    old = efficiency.run_energy([_log(None)], samples=8)
    assert "steplog/1" in old["energy_note"]


def test_mfu_divides_by_the_named_peak():
    cells = pd.DataFrame(
        {
            "model": ["resnet50", "resnet50"],
            "precision": ["amp", "fp32"],
            "throughput": [3000.0, 100.0],
            "devices": [2, 1],
            "device_name": ["NVIDIA A100-SXM4-80GB", "cpu"],
            "status": ["ok", "ok"],
        }
    )
    out = tables.add_flops(cells.copy(), {"resnet50": 12.3e9}, peak_tflops=0.0)
    assert out["mfu"][0] == pytest.approx(3000 * 12.3e9 / 1e12 / (312.0 * 2))
    assert out["peak_basis"][0].startswith("NVIDIA A100-SXM4-80GB fp16 dense 312")
    assert math.isnan(out["mfu"][1]) and out["peak_basis"][1] == ""
    configured = tables.add_flops(cells.copy(), {"resnet50": 12.3e9}, peak_tflops=100.0)
    assert configured["peak_basis"].tolist() == ["run.peak_tflops 100 TFLOP/s"] * 2
