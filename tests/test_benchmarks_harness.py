"""benchmarks/harness_overhead.py: rounds, rotation, best baseline and the stopping rule (no timing)."""

import importlib.util
import itertools
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "harness_overhead.py"
spec = importlib.util.spec_from_file_location("harness_overhead", SCRIPT)
harness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)


def fake_arms(figures: dict):
    """run_arm over fixed sequences of throughputs per (kind, name); records the call order."""
    sequences = {arm: itertools.cycle(values) for arm, values in figures.items()}
    calls = []

    def run_arm(kind, name):
        calls.append((kind, name))
        return next(sequences[kind, name]), (12.5 if name == "compiled" else None)

    return run_arm, calls


def measure(figures, *argv):
    args = harness.parse_args(["--frameworks", "pytorch", *argv])
    run_arm, calls = fake_arms(figures)
    baselines = [name for kind, name in figures if kind == "baseline"]
    variants = [name for kind, name in figures if kind == "runner"]
    return harness.measure_framework("pytorch", baselines, variants, args, run_arm), calls


def test_steady_ratios_stop_at_min_rounds():
    figures = {("baseline", "eager"): [10.0], ("runner", "dlbench"): [9.9]}
    result, calls = measure(figures, "--min-rounds", "3", "--max-rounds", "10")
    assert result["rounds"] == 3 and result["converged"]
    assert len(calls) == 6


def test_noisy_ratios_run_to_max_rounds_unconverged():
    figures = {("baseline", "eager"): [10.0], ("runner", "dlbench"): [6.0, 12.0, 9.0, 14.0]}
    result, _ = measure(figures, "--min-rounds", "2", "--max-rounds", "7")
    assert result["rounds"] == 7 and not result["converged"]
    assert len(result["runner"]["dlbench"]) == 7


def test_converges_once_the_interval_narrows():
    # two wild rounds, then steady: the median's interval narrows within ±3 % after a few more
    runner = [5.0, 20.0] + [10.0] * 30
    figures = {("baseline", "eager"): [10.0], ("runner", "dlbench"): runner}
    result, _ = measure(figures, "--min-rounds", "2", "--max-rounds", "30")
    assert result["converged"] and 3 < result["rounds"] < 30
    ratios = [r / 10.0 for r in result["runner"]["dlbench"]]
    value, low, high = harness.ratio_summary(ratios, "median")
    assert value * 0.97 <= low and high <= value * 1.03


def test_order_rotates_and_best_baseline_is_the_ratios_reference():
    figures = {
        ("baseline", "eager"): [8.0],
        ("baseline", "compiled"): [10.0],
        ("runner", "dlbench"): [9.8],
    }
    result, calls = measure(figures, "--rounds", "3")
    firsts = [calls[i * 3] for i in range(3)]
    assert firsts == [("baseline", "eager"), ("baseline", "compiled"), ("runner", "dlbench")]
    assert harness.best_baseline(result["baseline"]) == "compiled"
    assert result["first_step"] == {"eager": [], "compiled": [12.5] * 3}
    assert result["rounds"] == 3 and result["converged"]


def test_a_variant_outside_the_tolerance_keeps_rounds_going():
    figures = {
        ("baseline", "hybrid"): [10.0],
        ("runner", "waitall"): [9.5],
        ("runner", "loss"): [5.0, 15.0, 10.0],
    }
    result, _ = measure(figures, "--min-rounds", "2", "--max-rounds", "5")
    assert result["rounds"] == 5 and not result["converged"]


def test_single_round_interval_is_nan_and_never_within():
    value, low, high = harness.ratio_summary([0.99], "median")
    assert value == 0.99 and not harness.within(value, low, high, 0.03)


def test_arguments():
    args = harness.parse_args(["--model", "inception_v3"])
    assert (args.image_size, args.min_rounds, args.max_rounds) == (299, 4, 16)
    assert harness.parse_args([]).image_size == 224
    assert harness.parse_args(["--rounds", "1", "--image-size", "64"]).max_rounds == 1
    with pytest.raises(SystemExit):
        harness.parse_args(["--min-rounds", "5", "--max-rounds", "3"])
    chosen = harness.chosen_baselines(["pytorch:compiled"], ["pytorch", "mxnet"])
    assert chosen == {"pytorch": ["compiled"], "mxnet": ["hybrid"]}
    assert harness.available_baselines("pytorch") == ["compiled", "eager"]
    with pytest.raises(SystemExit):
        harness.chosen_baselines(["pytorch:nonesuch"], ["pytorch"])
