"""Measurement protocol presets, named after the study that used them. Stdlib only."""

from __future__ import annotations

from dataclasses import dataclass, fields

STATISTICS = ("mean", "median", "olympic_mean")

# warm-up steps, measured steps, repeats, statistic over repeats.
PRESETS: dict[str, dict] = {
    # CAICT 2020 open-source framework test: 120 mini-batches, first 20 warm-up, 3 runs, mean.
    "caict2020": {"warmup_steps": 20, "measured_steps": 100, "repeats": 3, "statistic": "mean"},
    # tf_cnn_benchmarks: 10 warm-up steps, 100 measured, 5 runs averaged.
    "tf_cnn_benchmarks": {"warmup_steps": 10, "measured_steps": 100, "repeats": 5, "statistic": "mean"},
    # OneFlow DLPerf: 7 runs, median.
    "dlperf": {"warmup_steps": 20, "measured_steps": 100, "repeats": 7, "statistic": "median"},
    # PaddlePaddle VGG16 baseline: 7 runs, median.
    "paddle": {"warmup_steps": 20, "measured_steps": 100, "repeats": 7, "statistic": "median"},
    # MLPerf-style olympic mean: drop the best and the worst repeat.
    "mlperf": {"warmup_steps": 20, "measured_steps": 100, "repeats": 5, "statistic": "olympic_mean"},
}

# loss_tolerance: no preset names one (the sanity check's, dlbench.analysis.sanity; schema default).
OVERRIDABLE = ("warmup_steps", "measured_steps", "repeats", "statistic", "loss_tolerance")


def resolve(protocol_config: dict) -> dict:
    """Preset values with the config's individual overrides applied."""
    name = protocol_config["preset"]
    if name not in PRESETS:
        raise ValueError(f"protocol.preset: unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    resolved = {"preset": name, **PRESETS[name]}
    for key in OVERRIDABLE:
        if protocol_config.get(key) is not None:
            resolved[key] = protocol_config[key]
    if resolved["repeats"] == "auto":  # adaptive repeats (dlbench/analysis/adaptive.py)
        adaptive = resolved["adaptive"] = {**ADAPTIVE_DEFAULTS, **(protocol_config.get("adaptive") or {})}
        if adaptive["min_repeats"] > adaptive["max_repeats"]:
            raise ValueError(
                f"protocol.adaptive: min_repeats {adaptive['min_repeats']} > max_repeats {adaptive['max_repeats']}"
            )
    return resolved


ADAPTIVE_DEFAULTS = {"target": 0.02, "min_repeats": 3, "max_repeats": 10}


def planned_repeats(protocol: dict) -> int:
    """The repeats a cell is planned with: all of them, or, adaptive, the minimum."""
    return protocol["adaptive"]["min_repeats"] if protocol["repeats"] == "auto" else protocol["repeats"]


@dataclass(frozen=True)
class RunProtocol:
    """What one run is measured by (repeats are planning's): the launch request carries it as
    one value, the step log's header records `as_dict()`."""

    preset: str
    warmup_steps: int
    measured_steps: int
    statistic: str

    @classmethod
    def of(cls, protocol: dict) -> RunProtocol:
        """The run's part of a resolved protocol (`resolve()`'s dict)."""
        return cls(**{f.name: protocol[f.name] for f in fields(cls)})

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}
