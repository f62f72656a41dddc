"""The `batch: max` result file (results/batch_max/...json): the batch search (dlbench.planning.batch_search)
writes it, the launcher reads the batch from it. Stdlib only."""

from __future__ import annotations

import json
from pathlib import Path


def write_result(path: str, batch: int, history: list[dict], settings: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"batch": batch, "probes": history, **settings}, indent=1) + "\n")


def read_result(path: str) -> int:
    return int(json.loads(Path(path).read_text())["batch"])
