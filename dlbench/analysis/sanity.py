"""Sanity before speed: whether a run trained correctly, judged from its step logs' losses
and kept apart from its throughput (docs/sanity.md).

Per run, over each rank's losses in step order (warm-up and measured steps alike):
- every loss is finite (the worker writes a NaN or infinite loss as null);
- real data: the loss falls -- the last quarter's mean is at most the first quarter's
  plus `protocol.loss_tolerance` times it;
- synthetic data (one fixed batch, learnt by heart): the loss changes.
A run that fails a check is `suspect`, with a reason for people (dlbench.labels); it keeps
its throughput. A run without losses to judge (it did not finish) gets no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlbench import labels
from dlbench.analysis import stats
from dlbench.analysis.columns import col
from dlbench.planning.schema import schema_defaults
from dlbench.steplog import StepLog

PASS, SUSPECT = "pass", "suspect"


@dataclass(frozen=True)
class Verdict:
    sanity: str  # PASS, SUSPECT, or "" (nothing to judge)
    reason: str = ""
    first_quarter_loss: float | None = None
    last_quarter_loss: float | None = None

    def columns(self) -> dict:
        """The run's sanity columns of runs.csv."""
        return {
            col.sanity: self.sanity,
            col.sanity_reason: self.reason,
            col.loss_first_quarter: self.first_quarter_loss,
            col.loss_last_quarter: self.last_quarter_loss,
        }


NO_VERDICT = Verdict("")


def loss_tolerance(protocol: dict) -> float:
    """How much the last quarter's mean loss may exceed the first quarter's on real data, as a
    fraction of it: the protocol's `loss_tolerance`, else the config schema's default."""
    value = protocol.get("loss_tolerance")
    return float(schema_defaults("protocol")["loss_tolerance"] if value is None else value)


def judge_losses(losses: list[float | None], data: str, tolerance: float) -> Verdict:
    """The verdict on one rank's losses (None: a loss that was not finite)."""
    if not losses:
        return NO_VERDICT
    not_finite = [i for i, loss in enumerate(losses) if loss is None]
    if not_finite:
        return Verdict(SUSPECT, labels.sanity_not_finite(not_finite[0], len(not_finite), len(losses)))
    first, last = stats.quarter_means(losses)
    verdict = Verdict(PASS, "", first, last)
    if data == "real" and last - first > tolerance * abs(first):
        return Verdict(SUSPECT, labels.sanity_rose(first, last, tolerance), first, last)
    if data != "real" and len(losses) > 1 and max(losses) == min(losses):
        return Verdict(SUSPECT, labels.sanity_flat(losses[0], len(losses)), first, last)
    return verdict


def run_verdict(logs: list[StepLog], data: str, tolerance: float) -> Verdict:
    """The verdict on a run: rank 0's, or the first suspect rank's (its reason names the rank)."""
    verdicts = []
    for log in logs:
        losses = [step["loss"] for step in log.steps if "loss" in step]
        verdicts.append(judge_losses(losses, data, tolerance))
    if not verdicts:
        return NO_VERDICT
    for rank, verdict in enumerate(verdicts):
        if verdict.sanity == SUSPECT:
            prefix = f"rank {rank}: " if len(verdicts) > 1 else ""
            return Verdict(SUSPECT, prefix + verdict.reason, verdict.first_quarter_loss, verdict.last_quarter_loss)
    return verdicts[0]


def cell_sanity(verdicts: list[str], reasons: list[str]) -> tuple[str, str]:
    """A cell's verdict from its runs': suspect if any run is, pass if every judged run passed."""
    judged = [v for v in verdicts if v in (PASS, SUSPECT)]
    if not judged:
        return "", ""
    if SUSPECT in judged:
        suspect = sorted({r for v, r in zip(verdicts, reasons, strict=True) if v == SUSPECT and r})
        return SUSPECT, " | ".join(suspect)
    return PASS, ""
