"""Every shipped seed grid, resolved alone (the preset and the schema's defaults under it, nothing
else), plans what its seed ran, measured as its seed measured it: the table of
tests/seed_protocols.py, each value cited from the seed. Planning only."""

from __future__ import annotations

import itertools
import re
from collections import Counter

import pytest

from dlbench.analysis.references import load_published
from dlbench.coords import SINGLE_DEVICE, CellKey, Scale
from dlbench.planning import grid as grids
from dlbench.planning.config import resolve_files
from dlbench.protocol import resolve
from tests.conftest import REPO
from tests.seed_protocols import NOT_STATED, SEEDS, STUDIES, SeedStudy

PUBLISHED = REPO / "config/references/published_throughput.csv"


@pytest.fixture(scope="module", params=STUDIES, ids=lambda study: study.grid.rsplit("/", 1)[-1])
def seed_grid(request):
    """(the study, its grid file's resolved config, the planned grid)."""
    study: SeedStudy = request.param
    config = resolve_files([str(REPO / study.grid)])
    return study, config, grids.expand(config)


def planned_cells(plan: grids.Grid) -> set[CellKey]:
    """The cells the grid's tables will have: those that run and those N/A with a reason."""
    return {run.cell for run in plan.runs} | set(plan.unavailable)


def _matches(rule: dict, cell: CellKey) -> bool:
    values = cell.as_dict()
    return all(
        str(values[key]) in {str(v) for v in (want if isinstance(want, list) else [want])} for key, want in rule.items()
    )


def seed_cells(study: SeedStudy) -> set[CellKey]:
    """Every cell the seed ran, from the table alone."""
    cells = set()
    combos = itertools.product(study.frameworks.value, study.models.value, study.precision.value, study.scales.value)
    for framework, model, precision, scale in combos:
        many = Scale.parse(scale).devices > 1
        strategies = study.strategies.value[framework][model] if many else (SINGLE_DEVICE,)
        for data, batch, strategy in itertools.product(
            study.data.value[model], study.batches.value[model][precision], strategies
        ):
            cell = CellKey(framework, model, precision, data, str(batch), scale, strategy)
            if not any(_matches(rule.value, cell) for rule in study.not_run):
                cells.add(cell)
    return cells


def test_the_protocol_is_the_seeds(seed_grid):
    study, config, plan = seed_grid
    protocol = resolve(config["protocol"])
    assert protocol == plan.protocol
    for key in ("warmup_steps", "measured_steps", "repeats", "statistic"):
        assert protocol[key] == getattr(study, key).value, f"{study.grid}: protocol {key}"
    repeats = Counter(run.cell for run in plan.runs)
    assert plan.runs and set(repeats.values()) == {study.repeats.value}
    assert {run.repeat for run in plan.runs} == set(range(1, study.repeats.value + 1))


def test_images_and_sequences_are_the_seeds_size(seed_grid):
    study, config, plan = seed_grid
    sizes = {cell.model: grids.planned_sizes(config["run"], cell.model) for cell in planned_cells(plan)}
    assert {model: image for model, (image, _) in sizes.items() if image} == study.image_size.value, study.grid
    assert {model: tokens for model, (_, tokens) in sizes.items() if tokens} == study.seq_len.value, study.grid


def test_the_grid_axes_are_the_seeds(seed_grid):
    study, config, plan = seed_grid
    cells = planned_cells(plan)
    assert tuple(config["grid"]["frameworks"]) == study.frameworks.value
    assert tuple(config["grid"]["models"]) == study.models.value
    assert {c.precision for c in cells} == set(study.precision.value)
    assert {c.scale for c in cells} == set(study.scales.value)
    for model in study.models.value:
        of_model = [c for c in cells if c.model == model]
        assert {c.data for c in of_model} == set(study.data.value[model]), model
        for precision, batches in study.batches.value[model].items():
            assert {c.batch for c in of_model if c.precision == precision} == set(map(str, batches)), (model, precision)
    for framework, per_model in study.strategies.value.items():
        for model, strategies in per_model.items():
            used = {c.strategy for c in cells if (c.framework, c.model) == (framework, model)} - {SINGLE_DEVICE}
            # A framework the seed did not run a model on has no multi-device cell of it.
            assert used <= set(strategies), (framework, model)
    assert config["references"]["hardware"] == study.hardware


def test_the_grid_plans_every_cell_the_seed_ran_and_no_other(seed_grid):
    study, _, plan = seed_grid
    planned, ran = planned_cells(plan), seed_cells(study)
    assert not planned - ran, f"{study.grid} plans cells the seed did not run: {sorted(planned - ran)[:5]}"
    assert not ran - planned, f"{study.grid} leaves out cells the seed ran: {sorted(ran - planned)[:5]}"


def test_every_published_number_has_its_planned_cell(seed_grid):
    """The published rows of the grid's hardware (config/references/published_throughput.csv,
    as the report reads them), each a cell of the grid unless its strategy is one no plug-in offers."""
    study, _, plan = seed_grid
    if not study.hardware:
        pytest.skip(f"{study.seed} published charts only, no numbers")
    refs = load_published(str(PUBLISHED))
    refs = refs[refs["source"].str.startswith(f"seed{study.seed[:3]} ")]
    refs = refs[refs["hardware"].str.contains(study.hardware, regex=False)]
    assert set(refs["strategy"]) == set(study.published_strategies), "a published strategy the table does not map"
    cells, unreproduced = planned_cells(plan), 0
    for row in refs.itertuples():
        strategy = study.published_strategies[row.strategy]
        if strategy is None:
            unreproduced += 1
            continue
        nodes = int(row.nodes)
        scale = f"{nodes}x{int(row.gpus) // nodes}"
        wanted = CellKey(
            study.frameworks.value[0],
            row.model,
            row.precision,
            row.data,
            row.batch_per_device,
            scale,
            strategy if row.gpus > 1 else SINGLE_DEVICE,
        )
        assert wanted in cells, f"published {row.model} {row.data} bs{row.batch_per_device} {scale} {row.strategy}"
    assert len(refs) > unreproduced
    assert bool(unreproduced) == bool(study.not_reproduced)


def test_every_value_is_cited_or_said_to_be_unstated():
    for study in STUDIES:
        for cited in study.cited:
            assert cited.quotes or cited.note.startswith(NOT_STATED), (study.seed, cited.value)


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"the seeds are not here ({SEEDS}; set DLBENCH_SEEDS)")
def test_every_quote_is_in_its_seed():
    def words(text: str) -> str:
        return re.sub(r"\s+", "", text)

    for study in STUDIES:
        seed = words((SEEDS / study.seed).read_text(encoding="utf-8"))
        for cited in study.cited:
            for quote in cited.quotes:
                assert words(quote) in seed, f"{study.seed} does not say {quote!r}"


def test_every_grid_file_that_names_a_seed_is_in_the_table():
    named = {
        f"config/grids/{path.name}"
        for path in (REPO / "config/grids").glob("*.yaml")
        if re.search(r"\(seed \d{3}\)", path.read_text(encoding="utf-8"))
    }
    assert named == {study.grid for study in STUDIES}
