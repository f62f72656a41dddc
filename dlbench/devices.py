"""The devices dlbench knows by name: their dense peak TFLOP/s (MFU's basis) and their memory
(fit before launch). Stdlib only (the GPU benchmarks read it inside framework environments).

Peaks are dense (no 2:4 sparsity) tensor-core TFLOP/s, from NVIDIA's datasheets: Tesla V100
(SXM2 / PCIe), A100 Tensor Core GPU (2021), H100 Tensor Core GPU (2023, SXM / PCIe), H200
Tensor Core GPU (2024, SXM; its compute is the H100 SXM's). The datasheets print TF32/BF16/FP16
"with sparsity": the dense figures are half (H100: the architecture whitepaper's dense
figures). docs/gpu.md lists the table with its sources.
"""

from __future__ import annotations

# (name fragment, form-factor fragment or "") -> {precision: dense TFLOP/s}; first match wins.
PEAK_TFLOPS = (
    ("V100", "PCIE", {"fp32": 14.0, "fp16": 112.0}),
    ("V100", "", {"fp32": 15.7, "fp16": 125.0}),
    ("A100", "", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    ("H100", "PCIE", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    ("H100", "", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    ("H200", "", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
)
# The peak a run's precision is held to: the frameworks run fp32 convolutions and matmuls in
# TF32 on Ampere and later by default (cuDNN, XLA, TF), and AMP on CUDA in fp16.
PEAK_PRECISION = {"fp32": ("tf32", "fp32"), "amp": ("fp16",)}


def peak(device_name: str, precision: str) -> tuple[float, str] | None:
    """The dense peak TFLOP/s of one device for `precision`, and what it is (None: unknown)."""
    name = device_name.upper()
    for fragment, form, peaks in PEAK_TFLOPS:
        if fragment in name and form in name:
            for kind in PEAK_PRECISION.get(precision, ()):
                if kind in peaks:
                    return peaks[kind], f"{device_name} {kind} dense {peaks[kind]:g} TFLOP/s (NVIDIA datasheet)"
    return None


# Each device's memory as nvidia-smi reports it (GiB), by run.gpu_type (dlbench.planning.fit).
MEMORY_GIB = {
    "a100": 80.0,
    "a100-40gb": 40.0,
    "a100-80gb": 80.0,
    "h100": 79.6,
    "h200": 140.4,
    "l40s": 44.5,
    "v100": 32.0,
    "v100-16gb": 16.0,
}
