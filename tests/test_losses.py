"""Loss curves and the convergence check between frameworks (dlbench.analysis.losses): real
training (a numpy softmax regression, the same model and batch in each "framework") through
the real worker, which writes real step logs; one framework's learning rate is made wrong and
the check must flag it, and must not flag frameworks that learn alike."""

import math
import types
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from dlbench.analysis import losses, tables
from dlbench.coords import CELL_FIELDS
from dlbench.launch import worker
from dlbench.planning.grid import Grid
from dlbench.protocol import RunProtocol
from dlbench.report.sections import convergence_rows, model_sections
from dlbench.runners.base import Runner, RunSpec
from tests.conftest import make_coords

PROTOCOL = {"preset": "caict2020", "warmup_steps": 2, "measured_steps": 12, "statistic": "mean", "repeats": 2}


class SoftmaxRegression(Runner):
    """Plain numpy SGD on one fixed batch; the learning rate is the class's, set per framework."""

    learning_rates: dict = {}

    def build(self):
        import numpy as np

        self.np, rng = np, np.random.default_rng(self.spec.seed)
        self.x = rng.standard_normal((32, 64)).astype(np.float32)
        self.y = rng.integers(0, 10, 32)
        self.w = np.zeros((64, 10), np.float32)
        self.lr = self.learning_rates[self.spec.coords.framework]

    def step(self, batch=None):
        np, rows = self.np, self.np.arange(len(self.y))
        logits = self.x @ self.w
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        loss = float(-np.log(p[rows, self.y]).mean())
        p[rows, self.y] -= 1.0
        self.w -= self.lr * self.x.T @ p / len(self.y)
        return loss


def train(root, monkeypatch, learning_rates: dict) -> tuple:
    """Two repeats of each framework's cell, trained; (runs, cells, curves) as the derivation makes them."""
    SoftmaxRegression.learning_rates = learning_rates
    monkeypatch.setattr(worker, "framework_module", lambda name: types.SimpleNamespace(Runner=SoftmaxRegression))
    coords = []
    for framework, strategy in (("pytorch", "single"), ("jax", "single")):
        for repeat in (1, 2):
            c = make_coords(framework=framework, strategy=strategy, repeat=repeat)
            spec = RunSpec(coords=c, batch=8, image_size=32, seq_len=0, threads=1, device="cpu")
            (root / c.run_dir).mkdir(parents=True)
            log = str(root / c.run_dir / "rank0.steps.jsonl")
            assert worker.run_rank(spec, RunProtocol.of(PROTOCOL), log, 0) == "ok"
            coords.append(c)
    experiment = Grid(runs=coords, unavailable={}, protocol=PROTOCOL)
    return tables.build_with_curves(experiment, root, convergence_tolerance=0.05)


def test_a_framework_with_a_wrong_learning_rate_is_flagged_as_training_slower(tmp_path, monkeypatch):
    runs, cells, curves = train(tmp_path, monkeypatch, {"pytorch": 0.5, "jax": 0.005})
    verdict = cells.set_index("framework")
    assert verdict.loc["pytorch", "convergence"] == "best"
    assert verdict.loc["jax", "convergence"] == "slower", verdict.loc["jax", "convergence_reason"]
    assert verdict.loc["jax", "loss_gap_low"] > 0.05
    assert verdict.loc["jax", "convergence_reason"].startswith("trains slower than PyTorch (single)")
    # Every step of every run, in order, samples counted as they were seen.
    assert len(curves) == 4 * 14 and curves["loss"].notna().all()
    assert curves.groupby(["framework", "repeat"])["samples_seen"].max().eq(14 * 8).all()
    section = model_sections(cells, runs, [], curves)[0]
    assert section["loss_figure"].startswith("data:image/png;base64,")
    assert [r["slower"] for r in section["convergence_rows"]] == [True]
    assert "## Convergence across frameworks" in tables.markdown(cells, PROTOCOL)


def test_frameworks_that_learn_alike_are_level(tmp_path, monkeypatch):
    _, cells, _ = train(tmp_path, monkeypatch, {"pytorch": 0.5, "jax": 0.5})
    assert sorted(cells["convergence"]) == ["best", "level"]
    assert cells["loss_gap"].abs().max() == pytest.approx(0.0, abs=1e-6)


def hand_made(gaps_by_repeat: list[list[float]], scale: float = 10.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Cells and curves of two frameworks' ResNet-50 cells: PyTorch's loss falls from `scale` to 1;
    JAX's stands above it by `gaps` × `scale` at each step of the last quarter of each repeat."""
    rows = []
    for repeat, gaps in enumerate(gaps_by_repeat, start=1):
        measured = 4 * len(gaps)
        for framework in ("pytorch", "jax"):
            coords = asdict(make_coords(framework=framework, repeat=repeat))
            rows.append({**coords, "step": 0, "phase": "warmup", "samples_seen": 8, "loss": scale})
            for i in range(measured):
                last = i - (measured - len(gaps))
                loss = 1.0 + (gaps[last] * scale if framework == "jax" and last >= 0 else 0.0)
                rows.append({**coords, "step": i + 1, "phase": "measure", "samples_seen": 8 * (i + 2), "loss": loss})
    curves = pd.DataFrame(rows)
    cells = curves.drop_duplicates(CELL_FIELDS)[CELL_FIELDS].assign(devices=1).reset_index(drop=True)
    return cells, curves


@pytest.mark.parametrize(
    ("centre", "spread", "verdict"),
    [(0.0, 0.005, "level"), (0.03, 0.06, "inconclusive"), (0.3, 0.02, "slower")],
)
def test_only_a_gap_whose_whole_interval_is_inside_the_tolerance_is_level(centre, spread, verdict):
    noise = np.random.default_rng(1).normal(0, spread, (3, 5))
    cells, curves = hand_made((centre + noise).tolist())
    judged = losses.convergence(cells, curves, 0.05).set_index("framework")
    jax = judged.loc["jax"]
    assert judged.loc["pytorch", "convergence"] == "best" and jax["convergence"] == verdict, jax["convergence_reason"]
    low, high = jax["loss_gap_low"], jax["loss_gap_high"]
    if verdict == "level":
        assert low >= -0.05 and high <= 0.05 and jax["convergence_reason"].startswith("level with PyTorch (single)")
    elif verdict == "slower":
        assert low > 0.05
    else:  # crosses the high edge only: the repeats it would take to bring the CI below it
        assert -0.05 < low < 0.05 < high
        needed = math.ceil(3 * ((high - jax["loss_gap"]) / (0.05 - jax["loss_gap"])) ** 2)
        assert jax["convergence_reason"].startswith("inconclusive against PyTorch (single): ")
        assert jax["convergence_reason"].endswith(
            f"over 15 matched steps (tolerance 5%): the 95% CI crosses the ±5% band: "
            f"about {needed} repeats (now 3) to decide it, if the estimate holds"
        )
        assert tables.convergence_lines(judged.reset_index())[2] == (
            "0 of 1 compared cells train slower; 1 inconclusive (the gap's 95% CI crosses the tolerance)."
        )
        assert [r["inconclusive"] for r in convergence_rows(judged.reset_index())] == [True]


def test_one_matched_step_gives_no_interval_and_no_verdict_of_equality():
    cells, curves = hand_made([[0.01]])
    jax = losses.convergence(cells, curves, 0.05).set_index("framework").loc["jax"]
    assert jax["convergence"] == "inconclusive" and "no 95% CI" in jax["convergence_reason"]
    assert "cannot be decided" in jax["convergence_reason"]
