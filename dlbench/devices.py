"""The devices dlbench knows by name: their dense peak TFLOP/s (MFU's basis), their memory
(fit before launch) and whether they have float8 matmuls (the fp8 precision). Stdlib only (the
GPU benchmarks and the runners read it inside framework environments).

Peaks are dense (no 2:4 sparsity) tensor-core TFLOP/s, from NVIDIA's datasheets: Tesla V100
(SXM2 / PCIe), A100 Tensor Core GPU (2021), H100 Tensor Core GPU (2023, SXM / PCIe), H200
Tensor Core GPU (2024, SXM; its compute is the H100 SXM's), L4 Tensor Core GPU (2023). The
datasheets print TF32/BF16/FP16/FP8 "with sparsity": the dense figures are half (H100: the
architecture whitepaper's dense figures). FP8 dense: H100 SXM and H200 1979 (3958 with
sparsity), H100 PCIe 1513 (3026), L4 242.5 (485: the L4 datasheet's FP8 figure is a sparse
one). docs/gpu.md lists the table with its sources.
"""

from __future__ import annotations

# (name fragment, form-factor fragment or "") -> {precision: dense TFLOP/s}; the first entry
# whose fragments the name holds is the device's (L40 before L4: an L40S is no L4).
PEAK_TFLOPS = (
    ("V100", "PCIE", {"fp32": 14.0, "fp16": 112.0}),
    ("V100", "", {"fp32": 15.7, "fp16": 125.0}),
    ("A100", "", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    ("H100", "PCIE", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}),
    ("H100", "", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}),
    ("H200", "", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1979.0}),
    ("L40", "", {}),  # not in this table (its name holds "L4")
    ("L4", "", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}),
)
# The peak a run's precision is held to: the frameworks run fp32 convolutions and matmuls in
# TF32 on Ampere and later by default (cuDNN, XLA, TF), AMP on CUDA in fp16, and fp8 cells'
# linear layers in float8 (the device's fp8 peak: the rest of their FLOPs, attention, run at
# bf16's, so their MFU is a floor).
PEAK_PRECISION = {"fp32": ("tf32", "fp32"), "amp": ("fp16",), "fp8": ("fp8",)}


def peak(device_name: str, precision: str) -> tuple[float, str] | None:
    """The dense peak TFLOP/s of one device for `precision`, and what it is (None: unknown)."""
    name = device_name.upper()
    for fragment, form, peaks in PEAK_TFLOPS:
        if fragment in name and form in name:
            for kind in PEAK_PRECISION.get(precision, ()):
                if kind in peaks:
                    return peaks[kind], f"{device_name} {kind} dense {peaks[kind]:g} TFLOP/s (NVIDIA datasheet)"
            return None
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

# CUDA compute capability by run.gpu_type (NVIDIA's CUDA GPUs list): what planning knows of a
# device before it runs; a type not listed is checked by the runner on the device itself.
COMPUTE_CAPABILITY = {
    "a100": (8, 0),
    "a100-40gb": (8, 0),
    "a100-80gb": (8, 0),
    "h100": (9, 0),
    "h200": (9, 0),
    "l4": (8, 9),
    "l40s": (8, 9),
    "v100": (7, 0),
    "v100-16gb": (7, 0),
}
# Precisions that need a kind of matmul some devices lack, and the compute capability from which
# CUDA devices have it: float8 tensor cores came with Ada (8.9) and Hopper (9.0).
PRECISION_NEEDS = {"fp8": ("float8 matmuls", (8, 9))}


def _needs(precision: str) -> str:
    what, (major, minor) = PRECISION_NEEDS[precision]
    return f"{precision} needs {what} (CUDA compute capability {major}.{minor} or later: Ada, Hopper, Blackwell)"


def precision_lacking(precision: str, device: str, gpu_type: str = "") -> str | None:
    """Why `device` (run.device, and run.gpu_type on CUDA) has not what `precision` needs (None:
    it has it, or planning cannot tell: an unnamed or unlisted GPU, checked at the run's start)."""
    if precision not in PRECISION_NEEDS:
        return None
    if device != "cuda":
        return f"{_needs(precision)}: the {device.upper()} has none"
    capability = COMPUTE_CAPABILITY.get(gpu_type.lower())
    if capability is None or capability >= PRECISION_NEEDS[precision][1]:
        return None
    return f"{_needs(precision)}: run.gpu_type {gpu_type} has compute capability {capability[0]}.{capability[1]}"


def capability_lacking(precision: str, device_name: str, capability: tuple[int, int]) -> str | None:
    """The same, for a CUDA device as the runner finds it (its name and compute capability)."""
    if precision not in PRECISION_NEEDS or tuple(capability) >= PRECISION_NEEDS[precision][1]:
        return None
    return f"{_needs(precision)}: {device_name} has compute capability {capability[0]}.{capability[1]}"
