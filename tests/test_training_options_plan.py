"""Activation checkpointing and gradient accumulation as run coordinates (dlbench/coords.py):
their path form, the grid's keys (global_batch resolved once, at planning), the launcher's
command line, N/A cells a workload cannot train, the tables' columns and their version 1."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from dlbench.analysis import columns, tables
from dlbench.coords import CellKey, RunCoords, parse_training, training_suffix
from dlbench.launch.request import LaunchRequest
from dlbench.planning import grid
from dlbench.protocol import RunProtocol
from tests.conftest import make_coords

BASE = {
    "grid": {
        "frameworks": ["pytorch"],
        "models": ["llama_small"],
        "batch_per_device": [2],
        "data": ["synthetic"],
        "precision": ["fp32"],
        "scales": ["1x1", "1x2"],
        "strategies": {"pytorch": ["ddp", "fsdp"]},
        "exclude": [],
        "only": [],
    },
    "protocol": {"preset": "caict2020", "repeats": 1},
}


def config(**grid_changes) -> dict:
    c = copy.deepcopy(BASE)
    c["grid"].update(grid_changes)
    return c


def test_a_run_at_the_defaults_keeps_its_directory_and_others_add_a_suffix():
    plain = make_coords(model="llama_small", scale="1x2", strategy="fsdp")
    assert plain.run_dir == "results/runs/pytorch/llama_small/fp32/synthetic/bs8/1x2/fsdp/rep1"
    both = plain.with_(activation_checkpointing="full", grad_accum=4)
    assert both.run_dir == "results/runs/pytorch/llama_small/fp32/synthetic/bs8/1x2/fsdp+ac_full+ga4/rep1"
    assert (
        RunCoords.from_wildcards(both.wildcards()) == both
        and CellKey.from_wildcards(both.cell.wildcards()) == both.cell
    )
    assert both.cell.label.endswith("1x2 fsdp+ac_full+ga4") and plain.cell.label.endswith("1x2 fsdp")
    for mode, accum, schedule, count in (
        ("none", 1, "none", 1),
        ("selective", 1, "none", 1),
        ("none", 12, "interleaved_1f1b", 4),
        ("full", 2, "1f1b", 16),
    ):
        options = {
            "activation_checkpointing": mode,
            "grad_accum": accum,
            "pp_schedule": schedule,
            "pp_microbatches": count,
        }
        assert parse_training(training_suffix(*options.values())) == options
    # a header or table from before the options existed reads at their defaults
    assert RunCoords.from_dict({k: v for k, v in both.as_dict().items() if k != "grad_accum"}).grad_accum == 1


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"activation_checkpointing": "some"}, "activation_checkpointing='some' is not one of none, selective, full"),
        ({"grad_accum": 0}, "grad_accum=0 is not a whole number of micro-batches >= 1"),
    ],
)
def test_a_bad_training_option_is_refused_naming_the_coordinate(changes, expected):
    with pytest.raises(ValueError, match=expected):
        make_coords(**changes)


def test_the_grid_plans_each_option_as_its_own_cell():
    g = grid.expand(config(activation_checkpointing=["none", "full"], grad_accum=[1, 2]))
    cells = {(r.scale, r.strategy + r.cell.training) for r in g.runs}
    assert len(g.runs) == 3 * 4 and ("1x2", "fsdp+ac_full+ga2") in cells and ("1x1", "single") in cells
    only_full = grid.expand(
        config(activation_checkpointing=["none", "full"], only=[{"activation_checkpointing": "full"}])
    )
    assert {r.activation_checkpointing for r in only_full.runs} == {"full"}


def test_a_global_batch_is_held_across_scales_by_accumulation():
    g = grid.expand(config(global_batch=[8], scales=["1x1", "1x2", "1x4"]))
    accum = {(r.scale, r.strategy): r.grad_accum for r in g.runs}
    assert accum[("1x1", "single")] == 4 and accum[("1x2", "ddp")] == 2 and accum[("1x4", "fsdp")] == 1
    with pytest.raises(grid.ConfigError, match=r"grid\.global_batch: 6 sequences .* batch_per_device 2 on scale 1x2"):
        grid.expand(config(global_batch=[6]))


def test_a_workload_without_the_option_is_an_na_cell_with_the_reason():
    g = grid.expand(config(models=["llama_small", "resnet50"], scales=["1x1"], activation_checkpointing=["full"]))
    (cell, why), *_ = [(c, w) for c, w in g.unavailable.items() if c.model == "resnet50"]
    assert cell.activation_checkpointing == "full" and "activation checkpointing" in why
    assert {r.model for r in g.runs} == {"llama_small"}


def test_the_launch_command_names_the_options_only_off_their_defaults():
    protocol = RunProtocol("caict2020", warmup_steps=1, measured_steps=2, statistic="mean")
    plain = LaunchRequest(coords=make_coords(model="llama_small"), protocol=protocol, run_dir="r", seq_len=16)
    assert "--activation-checkpointing" not in plain.to_argv() and "--grad-accum" not in plain.to_argv()
    coords = make_coords(model="llama_small", activation_checkpointing="selective", grad_accum=3)
    request = LaunchRequest(coords=coords, protocol=protocol, run_dir="r", seq_len=16)
    argv = request.to_argv()
    assert argv[argv.index("--grad-accum") + 1] == "3" and LaunchRequest.from_argv(argv) == request
    assert LaunchRequest.from_argv(plain.to_argv()).coords.grad_accum == 1


def test_a_version_1_table_reads_with_the_options_at_their_defaults(tmp_path):
    old = tmp_path / "cells.csv"
    pd.DataFrame([{"framework": "pytorch", "strategy": "ddp", "scale": "1x2", "throughput": 1.0}]).to_csv(
        old, index=False
    )
    read = columns.read_cells(old, "dlbench.tables/1")
    assert list(read.columns) == [
        "framework",
        "strategy",
        "activation_checkpointing",
        "grad_accum",
        "pp_schedule",
        "pp_microbatches",
        "scale",
        "throughput",
    ]
    assert read.loc[0, "activation_checkpointing"] == "none" and read.loc[0, "grad_accum"] == 1
    assert read.loc[0, "pp_schedule"] == "none" and read.loc[0, "pp_microbatches"] == 1
    # version 2 had the first two options: the pipeline's join after them
    read.drop(columns=["pp_schedule", "pp_microbatches"]).assign(grad_accum=2).to_csv(old, index=False)
    read = columns.read_cells(old, "dlbench.tables/2")
    assert list(read.columns)[2:6] == ["activation_checkpointing", "grad_accum", "pp_schedule", "pp_microbatches"]
    assert read.loc[0, "grad_accum"] == 2 and read.loc[0, "pp_schedule"] == "none"
    assert columns.TABLES_SCHEMA == "dlbench.tables/4"


def test_cells_md_tells_the_options_apart_in_its_rows():
    rows = []
    for mode, accum, value in (("none", 1, 100.0), ("full", 1, 80.0), ("none", 2, 110.0)):
        key = CellKey("pytorch", "llama_small", "fp32", "synthetic", "2", "1x2", "fsdp", mode, accum)
        rows.append({**key.as_dict(), "status": "ok", "throughput": value, "std": float("nan"), "n": 1})
    text = tables.markdown(pd.DataFrame(rows), {"preset": "p", "warmup_steps": 1, "measured_steps": 2, "repeats": 1,
                                                "statistic": "mean"})  # fmt: skip
    assert "1x2 (1n2c) fsdp+ac_full " in text and "1x2 (1n2c) fsdp+ga2 " in text and "1x2 (1n2c) fsdp " in text
