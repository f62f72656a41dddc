"""The step-log header's `framework.optimizer`: a run's training hyperparameters as each
runner reads them back from its framework's live objects once they are built (the optimizer,
its learning-rate schedule, its loss scaling), in one shape for every framework. Stdlib only.

    name            the optimizer's own name, lower case: "sgd", "adam", "adamw", "momentum" (Paddle's)
    learning_rate   the rate it applies; under a schedule, the rate the schedule ends at
    momentum, nesterov, betas [beta_1, beta_2], epsilon, weight_decay
                    where the optimizer has them, whatever the framework calls them
    ...             every other setting it has, under the framework's own name
    schedule        "constant", or {"name": "linear", "start_learning_rate", "end_learning_rate",
                    "steps"}: the rate goes linearly from start (first update) to end (update
                    `steps`, and every one after), or {"name": the framework's class, its settings}
    loss_scaling    null, or {"name", "dynamic", "scale" (now), "growth_interval", "growth_factor",
                    "backoff_factor", ...: what the scaler has}

Values are plain JSON numbers: a float32 setting is written as the shortest decimal that is
the same float32 (0.9, not 0.8999999761581421), so that equal settings read equal across frameworks.
"""

from __future__ import annotations

import math
import struct

# Framework spellings of the shared settings → the header's.
SHARED_NAMES = {
    "lr": "learning_rate",
    "eps": "epsilon",
    "wd": "weight_decay",
    "use_nesterov": "nesterov",
    "b1": "beta_1",
    "beta1": "beta_1",
    "b2": "beta_2",
    "beta2": "beta_2",
}
FIRST = ("name", "learning_rate", "momentum", "nesterov", "betas", "epsilon", "weight_decay")


def optimizer_record(name: str, settings: dict, schedule="constant", loss_scaling=None) -> dict:
    """The header's record of an optimizer: `settings` as the framework names them (renamed
    to the shared names, beta_1 and beta_2 joined into betas), its schedule and loss scaling."""
    renamed = {SHARED_NAMES.get(key, key): plain(value) for key, value in settings.items()}
    if "beta_1" in renamed:
        renamed["betas"] = [renamed.pop("beta_1"), renamed.pop("beta_2")]
    if "weight_decay" in renamed and renamed["weight_decay"] is None:
        renamed["weight_decay"] = 0.0  # Keras's "no weight decay"
    record = {"name": name.lower(), **renamed}
    ordered = {key: record.pop(key) for key in FIRST if key in record}
    return {**ordered, **dict(sorted(record.items())), "schedule": plain(schedule), "loss_scaling": plain(loss_scaling)}


def linear_schedule(start: float, end: float, steps: int) -> dict:
    """The record of a linear schedule (a warm-up when start < end)."""
    return {"name": "linear", "start_learning_rate": plain(start), "end_learning_rate": plain(end), "steps": int(steps)}


def loss_scaling_record(name: str, dynamic: bool, scale: float, **settings) -> dict:
    return {"name": name, "dynamic": bool(dynamic), "scale": plain(scale), **plain(settings)}


def plain(value):
    """`value` as JSON: numbers, strings, booleans, None, lists and dicts of them; a framework's
    scalar (numpy, torch, JAX, Paddle: anything with .tolist()) as its Python number."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return single_precision(value)
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "tolist"):
        return plain(value.tolist())
    return str(value)


def single_precision(value: float) -> float:
    """A float that is exactly a float32 (a float32 variable's value read into Python), as the
    shortest decimal that rounds to that float32; any other float unchanged."""
    if not math.isfinite(value) or _float32(value) != value:
        return value
    for digits in range(1, 10):
        shorter = float(f"{value:.{digits}g}")
        if _float32(shorter) == value:
            return shorter
    return value


def _float32(value: float) -> float:
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.nan
