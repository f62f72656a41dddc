"""Labels and texts for people, one spelling each: model titles, units, scales (with
CAICT's `2n8c`), series, statuses and what the coordinates mean.

Tables (cells.md), figures, findings and the report take their words from here, so that
a cell reads the same everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from dlbench.coords import SINGLE_DEVICE, TRAINING_DEFAULTS, Scale, training_suffix
from dlbench.models import CATALOGUE, sample_unit
from dlbench.runners import capabilities, framework_names

# The short label of a cell or run without a (full) number, as tables and figures print it.
STATUS_TEXT = {
    "oom": "OOM",
    "timeout": "TIMEOUT",
    "cancelled": "CANCELLED",
    "failed": "FAILED",
    "killed": "KILLED",
    "invalid": "BAD LOG",
    "missing": "NO LOG",
    "unavailable": "N/A",
}
# What each status means, in the order the report's legend lists them.
STATUS_MEANING = {
    "partial": "only n of the N repeats produced a number; the others' reason is in the note",
    "oom": "ran out of memory",
    "timeout": "exceeded the run's time limit",
    "cancelled": "cancelled (e.g. by the scheduler)",
    "failed": "the run raised an error",
    "killed": "a process died before finishing its step log",
    "invalid": "a step log failed validation",
    "missing": "no step log was written",
    "unavailable": "not run: the framework cannot build this model",
}
# Sanity (dlbench.analysis.sanity): whether a run trained correctly, apart from its speed.
SANITY_TEXT = {"pass": "PASS", "suspect": "SUSPECT"}
SANITY_MEANING = (
    "every loss finite; on real data the last quarter's mean loss at most the first quarter's "
    "(plus the protocol's tolerance); on synthetic data the loss changes. A SUSPECT cell keeps "
    "its throughput, marked, with the reason below"
)
# run.python: a framework's Python came from the site, not from our lock (provenance.site_environment).
SITE_ENV_MARK = "†"
SITE_ENV_TEXT = "site environment, not lock-pinned"
# Multi-device strategies are described by the frameworks' capabilities (strategy_text).
SINGLE_DEVICE_TEXT = "one process, no communication"
DATA_TEXT = {
    "synthetic": "synthetic data: one random batch created once on the device and reused, so no input "
    "pipeline is measured",
    "real": "real data: samples read from disk through the framework's input pipeline, which is measured too",
}
PRECISION_TEXT = {
    "fp32": "32-bit floating point",
    "amp": "automatic mixed precision",
    "fp8": "mixed precision, the linear layers' matmuls in float8 with dynamic scaling",
}
# A cell whose precision ran in its framework's emulation (Capabilities.emulated_precisions).
EMULATED_MARK = "‡"
EMULATED_TEXT = "emulated: a correctness path, not a speed figure"
SCALE_AXIS = "scale: nodes x devices per node"


# The memory figure's marks for planning's estimates (dlbench.planning.fit, .compiled).
MEMORY_ESTIMATE = "formula's estimate"
COMPILED_ESTIMATE = "compiler's estimate"


def status_label(status: str, unknown: Callable[[str], str] = str.upper) -> str:
    """`OOM`, `N/A`, …; a status without a label (partial) as `unknown` spells it."""
    return STATUS_TEXT.get(status, unknown(status))


def model_title(model: str) -> str:
    return CATALOGUE.get(model, {}).get("title", model)


def sample_noun(model: str) -> str:
    """What one sample of the model is: images, sequences (samples for a model not in the catalogue)."""
    return sample_unit(model) if model in CATALOGUE else "samples"


def unit(model: str) -> str:
    """The unit of the model's throughput: `images/s`."""
    return f"{sample_noun(model)}/s"


def devices(scale: str) -> int:
    return Scale.parse(scale).devices


def sorted_scales(scales: Iterable[str]) -> list[str]:
    """Distinct scales, fewest devices first."""
    return sorted(set(scales), key=lambda s: (devices(s), s))


def caict(scale: str) -> str:
    """CAICT's notation of a scale (nodes, devices in all): `2x4` → `2n8c`."""
    return Scale.parse(scale).caict_label


def with_training_in_strategy(frame):
    """A cells or runs table as tables and figures show it: where a cell trains with activation
    checkpointing, gradient accumulation or a pipeline schedule, its strategy is written as its run directory writes
    it (`fsdp+ac_full+ga4`), so that every row, series and label that tells cells apart by
    framework, scale and strategy tells these apart too. A table at the defaults: as it is."""
    if frame.empty or not set(TRAINING_DEFAULTS) <= set(frame.columns):
        return frame
    options = zip(*(frame[name] for name in TRAINING_DEFAULTS), strict=True)
    suffixes = [training_suffix(mode, int(accum), schedule, int(count)) for mode, accum, schedule, count in options]
    if not any(suffixes):
        return frame
    return frame.assign(strategy=[f"{s}{x}" for s, x in zip(frame["strategy"], suffixes, strict=True)])


def scale_and_strategy(scale: str, strategy: str) -> str:
    """`1x2 ddp`; a single-device scale alone."""
    return scale if strategy == SINGLE_DEVICE else f"{scale} {strategy}"


def scale_with_caict(scale: str, strategy: str) -> str:
    """`1x2 (1n2c) ddp`; a single-device scale without its strategy."""
    label = f"{scale} ({caict(scale)})"
    return label if strategy == SINGLE_DEVICE else f"{label} {strategy}"


def series_label(framework: str, strategy: str) -> str:
    """One row of a table or name in a sentence: `PyTorch`, or `PyTorch (ddp)` beyond one device."""
    return legend_label(framework, strategy)


def framework_label(framework: str) -> str:
    """A framework's name for people (its capabilities' label): `PyTorch`; the config name for
    a framework that is not registered (an archive's raw logs)."""
    return capabilities(framework).label if framework in framework_names() else framework


def framework_of(row) -> str:
    """The framework's name for people, of a table row (a cell or a run)."""
    return framework_label(row["framework"])


def cell_label(key) -> str:
    """A cell (coords.CellKey) for people: `PyTorch ResNet-50, fp32, synthetic data, batch 8, 1x2 ddp`."""
    return (
        f"{framework_label(key.framework)} {model_title(key.model)}, {key.precision}, {key.data} data, "
        f"batch {key.batch}, {scale_and_strategy(key.scale, key.strategy)}"
    )


def legend_label(framework: str, strategy: str) -> str:
    """A figure's series: `PyTorch`, or `PyTorch (ddp)` beyond one device."""
    name = framework_label(framework)
    return name if strategy == SINGLE_DEVICE else f"{name} ({strategy})"


def strategy_text(strategy: str, frameworks: Iterable[str]) -> str:
    """What a strategy does, as the capabilities of `frameworks` that offer it describe it."""
    if strategy == SINGLE_DEVICE:
        return SINGLE_DEVICE_TEXT
    known = set(framework_names())
    texts = []
    for fw in sorted(set(frameworks) & known):
        caps = capabilities(fw)
        if strategy in caps.strategy_names and caps.strategy(strategy).description not in texts:
            texts.append(caps.strategy(strategy).description)
    return "; ".join(texts) or strategy


def setup(batch: str, precision: str, data: str) -> str:
    """`batch 8/device, fp32, synthetic data`: what one table or figure panel holds fixed."""
    return f"batch {batch}/device, {precision}, {data} data"


def group_title(model: str, batch: str, precision: str, data: str) -> str:
    """The report's heading of one table: `ResNet-50, batch 8 per device, fp32, synthetic data`."""
    per_device = "the largest batch that fits" if batch == "max" else f"batch {batch}"
    return f"{model_title(model)}, {per_device} per device, {precision}, {data} data"


# The report's headings of its findings, by topic (dlbench.findings.vocabulary.Finding.topic).
FINDING_TOPICS = {
    "compare": "Frameworks compared",
    "scaling": "Scaling",
    "variant": "Variants: data, precision, strategy",
    "noise": "Noise",
    "status": "Cells without a number",
    "reference": "Published and baseline numbers",
}


def finding_topic(topic: str) -> str:
    return FINDING_TOPICS.get(topic, topic.capitalize())


def text(value, default: str = "") -> str:
    """A table value as text; `default` for a missing one (None, NaN)."""
    if value is None or (isinstance(value, float) and value != value):
        return default
    return str(value)


def sanity_not_finite(first_step: int, count: int, steps: int) -> str:
    return f"loss not finite from step {first_step} ({count} of {steps} steps)"


def sanity_rose(first: float, last: float, tolerance: float) -> str:
    """`loss rose 6.9 → 1e+05`: first-quarter mean → last-quarter mean."""
    allowed = f", more than the {tolerance:.0%} allowed" if tolerance else ""
    return f"loss rose {first:.3g} → {last:.3g} (first- to last-quarter mean{allowed})"


def sanity_flat(value: float, steps: int) -> str:
    return f"loss did not change ({value:.4g} at all {steps} steps)"


def sanity_label(sanity: str, reason: str = "") -> str:
    """`SUSPECT: loss rose 6.9 → 1e+05 …`, `PASS`, or "" (no verdict)."""
    text = SANITY_TEXT.get(sanity, "")
    return f"{text}: {reason}" if text and reason else text


def interval(low: float, high: float, spec: str = ".2f") -> str:
    """` [95% CI 1.19–1.31]`, or "" when there is no interval."""
    if low != low or high != high:
        return ""
    return f" [95% CI {low:{spec}}–{high:{spec}}]"


# Verdicts that could state equality (docs/sanity.md, "Equal only inside the band"): two things
# are called equal (same, level, within, no drift) only when the whole 95% interval of their
# difference lies inside the tolerance band; an interval that crosses an edge of the band is
# inconclusive and says how large a sample it would take to decide it (stats.decide_factor).
SAME, INCONCLUSIVE, FEW, NOISY, HIGHER, LOWER = "same", "inconclusive", "few", "noisy", "higher", "lower"
FASTER, SLOWER, WITHIN = "faster", "slower", "within"  # WITHIN: references.csv's same
BEST, LEVEL = "best", "level"  # the convergence check's lowest loss, and its same
CONVERGENCE_TEXT = {
    LEVEL: "level with",
    SLOWER: "trains slower than",
    FASTER: "trains faster than",
    INCONCLUSIVE: "inconclusive against",
}
DRIFT_TEXT = {"drift": "DRIFT", "none": "no drift"}
CANNOT_DECIDE = "cannot be decided by more repeats"
NOT_SPLIT = "no split by node found"  # placement: not flagged, which does not make the speeds equal


def band(tolerance: float) -> str:
    return f"±{tolerance:.0%}"


def to_decide(now: tuple[int, ...], factor: float, unit: str = "repeats") -> str:
    """`about 24 repeats (now 3) to decide it, if the estimate holds`, `about 9 and 12 repeats (now 3
    and 4) …`: each count (the sides that can grow) times `factor` (stats.decide_factor: the size at
    which the CI just clears the band's edge, so a minimum, not a promise). CANNOT_DECIDE where the
    factor is not finite."""
    if not (factor == factor and factor != float("inf")):
        return CANNOT_DECIDE
    needed = [max(n, math.ceil(n * factor - 1e-9)) for n in now]
    counts = f"{' and '.join(map(str, needed))} {unit} (now {' and '.join(map(str, now))})"
    return f"about {counts} to decide it, if the estimate holds"


def crosses(tolerance: float, now: tuple[int, ...], factor: float, unit: str = "repeats") -> str:
    """Why a comparison is inconclusive: its interval crosses the band, and what would decide it."""
    return f"the 95% CI crosses the {band(tolerance)} band: {to_decide(now, factor, unit)}"


def uncertain(verdict: str, repeats: tuple[int, int], what: str, tolerance: float, factor: float = math.nan) -> str:
    """What a comparison (dlbench.analysis.stats.ratio_verdict) may claim beside its ratio, or "" when
    the ratio's direction stands. `what`: the two things compared, e.g. `PyTorch and TensorFlow`;
    `factor`: stats.decide_factor, for an inconclusive one."""
    if verdict == FEW:
        return f"uncertain, too few repeats ({repeats[0]} and {repeats[1]})"
    if verdict == SAME:
        return f"{what} are level, the whole 95% CI within {band(tolerance)}"
    if verdict == INCONCLUSIVE:
        return f"{INCONCLUSIVE}, {crosses(tolerance, repeats, factor)}"
    if verdict == NOISY:
        return "uncertain, a noisy cell"
    return ""


# Within-run stability (dlbench.analysis.stability): why a run's measured window is flagged.
STABILITY_TEXT = {"steady": "steady", "trend": "TREND", "bimodal": "BIMODAL"}


def stability_too_few(steps: int, needed: int) -> str:
    return f"{steps} measured steps: too few to judge ({needed} needed)"


def stability_trend(first: float, last: float, change: float, steps: int) -> str:
    direction = "slower" if change > 0 else "faster"
    return (
        f"step time trends {direction} over the window: median {first * 1e3:.4g} ms (first third) → "
        f"{last * 1e3:.4g} ms (last third), {change:+.0%} along the Theil-Sen slope over {steps} steps"
    )


def stability_bimodal(split: float, share: float, steps: int) -> str:
    return f"two step-time modes split at {split * 1e3:.4g} ms; the smaller holds {share:.0%} of {steps} steps"


PLACEMENT_TEXT = {
    "layout": "repeats on different numbers of nodes",
    "node": "throughput splits by node",
}


# Adaptive repeats (dlbench.analysis.adaptive): why a cell stopped, or goes on.
def repeats_target(n: int, half: float, target: float) -> str:
    return f"target met after {n} repeats: 95% CI half-width {half:.1%} ≤ {target:.1%}"


def repeats_maximum(n: int, half: float, target: float) -> str:
    return f"maximum of {n} repeats reached: 95% CI half-width {half:.1%} > target {target:.1%}"


def repeats_more(n: int, half: float, target: float) -> str:
    return f"{n} repeats: 95% CI half-width {half:.1%} > target {target:.1%}, one more"


def repeats_failed(n: int, statuses: list[str]) -> str:
    return f"stopped after {n} repeats: a repeat ended {', '.join(statuses)}"
