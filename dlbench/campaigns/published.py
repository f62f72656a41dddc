"""Published campaigns: config/references/published_throughput.csv, one campaign per source and
hardware (seed 000's four platforms, seed 002, seed 003's two machines), turned into cells with
the same speedup/efficiency code as measured ones (dlbench.analysis.aggregate.add_speedup).

A published row becomes a cell: framework = the first word of the source's framework (the
rest is software in the manifest), plus a variant where one source publishes several numbers
for otherwise equal coordinates (tensorpack's fake-data locations, XLA); strategy = the source's
strategy as a safe name, or `single` for the one 1-GPU number of a series. Sources with no rows
in the file (seed 001, CAICT 2020: their numbers are in figures only) are named in MISSING.

The LLM sources (torchtitan's and NVIDIA's DGX Cloud recipes' Llama 3.1 8B rows on
H100, each with its repository, path and commit) are dlbench's own file, LLM_PUBLISHED, in the
same columns; `import_published` adds its campaigns after the configured CSV's, so every
reader of published campaigns (the report's campaigns section, `python -m dlbench.campaigns`)
lists them beside the seeds'.
"""

from __future__ import annotations

import os
import re

import pandas as pd

from dlbench.analysis.aggregate import add_speedup
from dlbench.analysis.columns import TABLES_SCHEMA, col, with_training_defaults
from dlbench.analysis.references import load_published
from dlbench.campaigns.campaign import SCHEMA, Campaign
from dlbench.coords import CELL_FIELDS, SINGLE_DEVICE

MISSING = {
    "seed001": "seed 001 (TensorFlow single-node strategies) has no throughput rows in the published CSV",
    "caict2020": "CAICT 2020 (seed 004) publishes its numbers as figures only: no rows in the published CSV",
}
SERIES = [f for f in CELL_FIELDS if f not in (col.scale, col.strategy)]
LLM_PUBLISHED = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "config",
    "references",
    "published_llm.csv",
)


def slug(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", value.lower()).strip("_")


def campaign_id(source: str, hardware: str) -> str:
    return f"{source.split()[0]}-{slug(hardware)[:40].strip('_')}"


def parse_statistic(text: str) -> dict:
    """'mean of 5 runs; 10 warm-up steps, mean of next 100' → the protocol it describes."""
    found = re.search(r"(mean|median) of (\d+) runs", text)
    warmup = re.search(r"(\d+) warm-up steps|skip (\d+) steps", text)
    measured = re.search(r"next (\d+)", text)
    return dict(  # the protocol's keys, named as the tables' columns are
        statistic=found.group(1) if found else ("single run" if "single run" in text else text),
        repeats=int(found.group(2)) if found else 1,
        warmup_steps=int(next(g for g in warmup.groups() if g)) if warmup else None,
        measured_steps=int(measured.group(1)) if measured else None,
        preset=None,
    )


def _variant(row: pd.Series) -> str:
    location = re.search(r"\((.*)\)", row["data_raw"])
    parts = [location.group(1).replace("fake-location=", "fake ")] if location else []
    if "XLA" in row["notes"]:
        parts.append("xla")
    return slug(" ".join(parts))


def _cells(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.assign(
        framework=[
            slug(f.split()[0]) + (f"_{v}" if v else "")
            for f, v in zip(rows[col.framework], rows["variant"], strict=True)
        ],
        batch=rows["batch_per_device"].astype(str),
        scale=[f"{int(n)}x{int(g) // int(n)}" for n, g in zip(rows[col.nodes], rows["gpus"], strict=True)],
        strategy=rows[col.strategy].map(slug),
        devices=rows["gpus"].astype(int),
        status="ok",
        reason="",
        n=1,
        repeats=1,
    )
    rows = with_training_defaults(rows)  # the published studies trained plainly
    # One 1-GPU number per series is the single-device cell; several (one per strategy) keep theirs.
    singles = rows[rows[col.devices] == 1].groupby(SERIES)[col.strategy].transform("nunique")
    rows.loc[singles[singles == 1].index, col.strategy] = SINGLE_DEVICE
    cells = rows[[*CELL_FIELDS, col.devices, col.status, col.reason, col.statistic, col.throughput, col.n, col.repeats]]
    return _with_speedup(cells.drop_duplicates(subset=CELL_FIELDS))


def _with_speedup(cells: pd.DataFrame) -> pd.DataFrame:
    """add_speedup per strategy: over the strategy's own 1-GPU number where the source gives one
    (listed first, so add_speedup takes it), else over the series' single-device number."""
    singles = cells[cells[col.strategy] == SINGLE_DEVICE]
    parts = [add_speedup(singles)] if not singles.empty else []
    for strategy in sorted(set(cells[col.strategy]) - {SINGLE_DEVICE}):
        parts.append(add_speedup(pd.concat([cells[cells[col.strategy] == strategy], singles])))
    merged = pd.concat(parts).drop_duplicates(subset=CELL_FIELDS)
    return merged.sort_values(CELL_FIELDS, kind="stable").reset_index(drop=True)


def _published_rows(path: str) -> pd.DataFrame:
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    return load_published(path).assign(data_raw=raw[col.data], statistic_text=raw[col.statistic])


def import_published(path: str, extra: tuple[str, ...] = (LLM_PUBLISHED,)) -> list[Campaign]:
    """One campaign per (source, hardware) of the published CSV, in file order, then those of
    `extra` (the LLM sources' file; one that is the configured CSV itself is not read twice)."""
    paths = [path, *(p for p in extra if os.path.exists(p) and not os.path.samefile(p, path))]
    refs = pd.concat([_published_rows(p) for p in paths], ignore_index=True)
    refs["variant"] = [_variant(r) for _, r in refs.iterrows()]
    refs[col.statistic] = refs["statistic_text"].map(lambda t: parse_statistic(t)["statistic"])
    campaigns = []
    for (source, hardware), rows in refs.groupby(["source", "hardware"], sort=False):
        protocol = parse_statistic(rows["statistic_text"].iloc[0])
        manifest = {
            "schema": SCHEMA,
            "tables_schema": TABLES_SCHEMA,
            "id": campaign_id(source, hardware),
            "kind": "published",
            "source": source,
            "date": re.search(r"(19|20)\d\d", source).group(0) if re.search(r"(19|20)\d\d", source) else "",
            "config_sha256": "",
            "protocol": protocol,
            "image_size": "",  # not a column: the manifest's
            "software": {
                "frameworks": {
                    slug(f.split()[0]): v for f, v in zip(rows[col.framework], rows[col.framework_version], strict=True)
                }
            },
            "hardware": {"device": "cuda", "gpu": hardware, "gpu_driver": "", "cpu_model": "", col.nodes: []},
        }
        campaigns.append(Campaign(manifest, _cells(rows.reset_index(drop=True))))
    return campaigns


def find(campaigns: list[Campaign], prefix: str) -> Campaign:
    """The campaign whose id starts with `prefix` (e.g. `seed000-nvidia_dgx_1`)."""
    matches = [c for c in campaigns if c.id.startswith(prefix)]
    if not matches:
        known = ", ".join(c.id for c in campaigns)
        reason = MISSING.get(prefix.split("-")[0], "")
        raise KeyError(f"no published campaign {prefix!r}{': ' + reason if reason else ''} (known: {known})")
    return matches[0]
