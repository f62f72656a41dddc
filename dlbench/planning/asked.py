"""What a working directory was last asked for, kept in small files whose mtime moves only when
their content changes, so that a changed grid or setting is seen under mtime-only rerun triggers.

The profiles re-run a job only when an input is newer than its outputs (`rerun-triggers:
[mtime]`: a code change must not re-run the grid). A job whose params or set of inputs changed
is not re-run then: the tables of one grid, newer than every log they read, kept the next
grid's runs from ever being needed ("Nothing to be done"). So while the workflow is planned,
each derived product's basis is written here — the config and the grid's runs for the tables,
the sizes a model's FLOPs are counted at, the settings of a batch search — and rewritten only
when it changes; each is an input of its rule (docs/workdir.md). This holds under every profile,
every rerun-trigger set and a plain `snakemake`, and costs one small file per product, not a
file per job. Analysis environment.
"""

from __future__ import annotations

import hashlib
import json
import os

from dlbench.files import write_atomically
from dlbench.models import kind_of
from dlbench.planning.grid import planned_sizes

ASKED_DIR = "results/asked"
# The tables, figures and report: the resolved config and the grid's runs.
TABLES = f"{ASKED_DIR}/tables.json"
# A model's FLOPs count (aggregate.smk, model_flops): the sizes it is counted at.
FLOPS_TEMPLATE = ASKED_DIR + "/flops/{model}.json"
# A batch search (train.smk, find_max_batch): what its probes run with.
BATCH_SEARCH_TEMPLATE = ASKED_DIR + "/batch_search/{framework}/{model}.json"


def _text(basis: dict) -> str:
    return json.dumps(basis, sort_keys=True, indent=1, default=str) + "\n"


def tables_basis(config: dict, run_records) -> dict:
    """What the tables are derived from beyond the raw logs: the resolved config (grid, protocol,
    analysis settings ...) and the grid's runs (a plug-in's capabilities also decide them)."""
    runs = "\n".join(run_records).encode()
    return {"config": config, "runs": len(run_records), "runs_sha256": hashlib.sha256(runs).hexdigest()}


def model_size(model: str, run: dict) -> dict:
    """The size a model trains at (config `run`'s, its default for 0): an image model's image
    size, a text or LLM model's sequence length; the other does not change it."""
    kind = kind_of(model)
    return {kind.size_field: kind.size(planned_sizes(run, model))}


def flops_basis(model: str, config: dict) -> dict:
    return {"model": model, **model_size(model, config["run"])}


def batch_search_basis(framework: str, model: str, config: dict) -> dict:
    """What find_max_batch's probes run with (workflow/scripts/find_max_batch.py) but its
    output's path and the framework's environment, which are inputs already."""
    run = config["run"]
    return {
        "framework": framework,
        "model": model,
        **model_size(model, run),
        "threads": run["threads"],
        "memory_cap_mb": run["memory_cap_mb"],
        "limit": config["batch_max"]["limit"],
        "options": config.get("framework_options", {}).get(framework) or {},
    }


def write_if_changed(path: str | os.PathLike, basis: dict) -> bool:
    """Write `basis` to `path` unless it holds it already (its mtime then stays); True if written."""
    text = _text(basis)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except OSError:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomically(path, text)
    return True


def record(config: dict, run_records, runs) -> None:
    """Every basis of this invocation's products (`runs`: the grid's RunCoords)."""
    write_if_changed(TABLES, tables_basis(config, run_records))
    for model in config["grid"]["models"]:  # as model_flops_files() (common.smk)
        write_if_changed(FLOPS_TEMPLATE.format(model=model), flops_basis(model, config))
    for framework, model in dict.fromkeys((run.framework, run.model) for run in runs if run.batch == "max"):
        path = BATCH_SEARCH_TEMPLATE.format(framework=framework, model=model)
        write_if_changed(path, batch_search_basis(framework, model, config))
