"""Expand a validated config into the list of runs (and the cells no framework can fill).

Checks that a JSON schema cannot express live here too (model not built by a framework,
strategy a framework does not offer); each raises `ConfigError` naming the key and value.
Stdlib only.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

from dlbench import protocol as protocols
from dlbench.coords import (
    NO_ACCUMULATION,
    NO_CHECKPOINTING,
    NO_PIPELINE,
    NO_PIPELINE_MICROBATCHES,
    PROFILE_REPEAT,
    SINGLE_DEVICE,
    CellKey,
    RunCoords,
    Scale,
)
from dlbench.model_kinds import SIZE_FIELDS
from dlbench.models import CATALOGUE, kind_of
from dlbench.planning import compiled, fit
from dlbench.runners import (
    capabilities,
    device_unavailable,
    framework_names,
    precision_problem_and_scope,
    strategy_unavailable,
    training_option_unavailable,
)


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Grid:
    runs: list[RunCoords]
    unavailable: dict[CellKey, str]  # cells that are in the grid but cannot run, with why
    protocol: dict
    # config `profile`: each cell's profiled run (repeat PROFILE_REPEAT), apart from `runs`
    profiled: list[RunCoords] = field(default_factory=list)
    # what planning says of its memory estimates from the compilers (dlbench.planning.compiled)
    notes: list[str] = field(default_factory=list)

    @functools.cached_property
    def run_protocol(self) -> protocols.RunProtocol:
        """What each run of the grid is measured by (the launch request's protocol); made once,
        read by every job's command."""
        return protocols.RunProtocol.of(self.protocol)


def _matches(rule: dict, values: dict) -> bool:
    """An exclude/only rule matches when every key it names matches (a value or a list)."""
    for key, wanted in rule.items():
        wanted = wanted if isinstance(wanted, list) else [wanted]
        if str(values[key]) not in {str(w) for w in wanted}:
            return False
    return True


def check_semantics(config: dict) -> None:
    """What the schema cannot say: cross-references between keys."""
    known = framework_names()
    grid = config["grid"]
    for fw in grid["frameworks"]:
        if fw not in known:
            raise ConfigError(f"grid.frameworks: unknown framework {fw!r}; known: {known}")
        capabilities(fw)  # a plug-in's own models join the catalogue as it loads
    for model in grid["models"]:
        if model not in CATALOGUE:
            raise ConfigError(f"grid.models: unknown model {model!r}; known: {sorted(CATALOGUE)}")
    _check_sizes(config.get("run") or {}, grid["models"])
    for fw, strategies in grid.get("strategies", {}).items():
        # A known framework outside the grid is fine (one file's strategies serve several
        # grids); an unknown name is a typo.
        if fw not in known:
            raise ConfigError(f"grid.strategies.{fw}: unknown framework {fw!r}; known: {known}")
        offered = capabilities(fw).strategy_names
        for s in strategies:
            if s not in offered:
                raise ConfigError(
                    f"grid.strategies.{fw}: {fw} does not offer strategy {s!r}; it offers {list(offered)}"
                )
    needs_strategy = [s for s in grid["scales"] if Scale.parse(s).devices > 1]
    for fw in grid["frameworks"]:
        if needs_strategy and not grid.get("strategies", {}).get(fw):
            raise ConfigError(
                f"grid.strategies.{fw}: scales {needs_strategy} use several devices: {fw} needs a strategy"
            )
    _check_rules(grid)
    _check_precisions(grid)


def _check_precisions(grid: dict) -> None:
    """A precision that a framework, or a model's kind, or the framework's workload for it
    cannot train in (dlbench.runners.precision_problem_and_scope), in a cell the grid's rules keep: one
    message naming the combination and the rule that leaves it out."""
    checked = set()
    for cell in planned_cells(grid):
        combination = (cell.framework, cell.model, cell.precision)
        if combination in checked:
            continue
        checked.add(combination)
        found = precision_problem_and_scope(*combination)
        if found:
            problem, scope = found
            precision = combination[2]
            raise ConfigError(
                f"grid.precision: {problem}. Leave {precision} out of grid.precision, or these cells out of the "
                f"grid: grid.exclude: [{{{scope}, precision: {precision}}}]"
            )


def _check_rules(grid: dict) -> None:
    """Every key of an exclude/only rule is a coordinate and every name it gives is one the
    registry knows (a typo would silently match nothing). Precision, data and scale values
    are the schema's to check."""
    coordinate_keys = set(CellKey.__dataclass_fields__) | {"repeat"}
    frameworks = framework_names()
    strategies = {SINGLE_DEVICE}.union(*(capabilities(fw).strategy_names for fw in frameworks))
    known = {"framework": frameworks, "model": sorted(CATALOGUE), "strategy": sorted(strategies)}
    for list_name in ("exclude", "only"):
        for i, rule in enumerate(grid.get(list_name, [])):
            for key, wanted in rule.items():
                if key not in coordinate_keys:
                    raise ConfigError(
                        f"grid.{list_name}[{i}]: unknown coordinate {key!r}; use one of {sorted(coordinate_keys)}"
                    )
                for j, value in enumerate(wanted if isinstance(wanted, list) else [wanted]):
                    if key in known and value not in known[key]:
                        where = f"grid.{list_name}[{i}].{key}" + (f"[{j}]" if isinstance(wanted, list) else "")
                        raise ConfigError(f"{where}: {value!r} is not a known {key} (known: {', '.join(known[key])})")


def _check_sizes(run: dict, models: list[str]) -> None:
    """A size a model's kind cannot train at (an LLM's sequence beyond its positions)."""
    for model in models:
        kind = kind_of(model)
        problem = kind.size_problem and kind.size_problem(model, kind.size(planned_sizes(run, model)))
        if problem:
            raise ConfigError(problem)


def _tensor_parallel_problem(fw: str, strategy: str, model: str, scale: str) -> str | None:
    """A tensor-parallel strategy's cell: N/A for a model that is no LLM; a ConfigError naming
    the scale when its devices per node cannot split the model's heads (dlbench.llm)."""
    if not capabilities(fw).strategy(strategy).tensor_parallel:
        return None
    split = kind_of(model).tensor_parallel_problem
    if split is None:
        return f"{strategy} splits the blocks of an LLM over a node's devices: {model} is no LLM"
    problem = split(model, Scale.parse(scale).devices_per_node)
    if problem:
        raise ConfigError(f"grid.scales: {scale!r} with {fw}'s {strategy}: {problem}")
    return None


def _pipeline_problem(fw: str, cell: CellKey) -> str | None:
    """A pipeline-parallel strategy's cell: N/A for a model whose kind is not pipelined; a
    ConfigError naming the grid key where the stages, the micro-batches or the schedule do
    not fit the model and batch (dlbench.pipelining)."""
    ranks = capabilities(fw).strategy(cell.strategy).pipeline_ranks(Scale.parse(cell.scale))
    if not ranks:
        return None
    check = kind_of(cell.model).pipeline_problem
    if check is None:
        return f"{cell.strategy} splits the blocks of an LLM into pipeline stages: {cell.model} is no LLM"
    if cell.grad_accum > 1:
        return (
            f"{cell.strategy} splits a step into pp_microbatches itself: "
            f"it does not accumulate (grad_accum {cell.grad_accum})"
        )
    problem = str(cell.batch).isdigit() and check(
        cell.model, cell.pp_schedule, ranks, int(cell.batch), int(cell.pp_microbatches)
    )
    if problem:
        raise ConfigError(f"{problem} ({fw}'s {cell.strategy}, {cell.model}, batch {cell.batch}, scale {cell.scale})")
    return None


def cell_pipeline_options(grid: dict, fw: str, strategy: str, batch, scale: str) -> list[tuple[str, int]]:
    """The (pp_schedule, pp_microbatches) pairs of a cell: the grid's for a pipeline-parallel
    strategy (micro-batches 0: one sequence each, batch × the pipeline's ranks, resolved here),
    the defaults for every other."""
    ranks = 0 if strategy == SINGLE_DEVICE else capabilities(fw).strategy(strategy).pipeline_ranks(Scale.parse(scale))
    if not ranks:
        return [(NO_PIPELINE, NO_PIPELINE_MICROBATCHES)]
    whole = int(batch) * ranks if str(batch).isdigit() else NO_PIPELINE_MICROBATCHES
    counts = [count or whole for count in grid.get("pp_microbatches", [0])]
    return [(name, count) for name in grid.get("pp_schedule", ["1f1b"]) for count in counts]


def planned_sizes(run: dict, model: str) -> tuple[int, int]:
    """(image size, sequence length) `model`'s runs train at: run.image_size and run.seq_len, 0
    meaning the catalogue entry's default of the size its kind trains at. Resolved here alone,
    at planning, for everything downstream: the launch request, the datasets, the FLOPs count,
    the batch search, the memory estimate."""
    if model not in CATALOGUE:  # the communication prescreen's all-reduce trains no model
        return 0, 0
    kind = kind_of(model)
    sizes = [run.get(name, 0) for name in SIZE_FIELDS]
    mine = SIZE_FIELDS.index(kind.size_field)
    sizes[mine] = sizes[mine] or CATALOGUE[model][kind.default_key]
    return sizes[0], sizes[1]


def _unfit(config: dict, cell: CellKey) -> str | None:
    """An LLM cell whose ranks' estimated memory exceeds the device's: the compiler's estimate
    where planning made one (dlbench.planning.compiled), else the formula's (dlbench.planning.fit)."""
    run = config.get("run", {})
    device_gib = fit.device_memory_gib(run)
    if device_gib is None:
        return None
    seq_len, device = planned_sizes(run, cell.model)[1], run.get("device", "cpu")
    if run.get("memory_estimate") == "formula":
        made = None
    else:
        made = compiled.lookup(cell, seq_len, device, target=compiled.target_digest(run))
    if made is not None:
        return fit.unfit_reason(made.gib, device_gib, made.basis)
    needed = fit.cell_estimate_gib(cell, seq_len, device)
    return None if needed is None else fit.unfit_reason(needed, device_gib)


def estimated_shapes(config: dict) -> list[dict]:
    """The shapes whose compiler estimate planning makes: those of the LLM cells that can
    otherwise run, each once (none for a grid without an LLM: nothing is listed)."""
    grid, run = config["grid"], config.get("run", {})
    llm = any(model in CATALOGUE and kind_of(model).memory_estimate for model in grid["models"])
    if not llm or run.get("memory_estimate") == "formula":
        return []
    shapes = {}
    for cell in planned_cells(grid):
        if cell.model not in CATALOGUE or not kind_of(cell.model).memory_estimate or _why_not(config, cell):
            continue
        shape = compiled.request(cell, planned_sizes(run, cell.model)[1], run.get("device", "cpu"))
        if shape is not None:
            shapes[compiled.key(shape)] = shape
    return list(shapes.values())


def cell_training_options(grid: dict, batch, scale: str) -> list[tuple[str, int]]:
    """The (activation checkpointing, grad_accum) pairs a cell of `batch` at `scale` is planned
    with; under grid.global_batch, grad_accum is resolved here, once: global ÷ (batch × devices).
    A global batch that does not divide is a ConfigError naming it."""
    # The schema's defaults are the coordinates' (a config made in code may leave them out).
    modes = grid.get("activation_checkpointing", [NO_CHECKPOINTING])
    if not grid.get("global_batch"):
        return [(mode, accum) for mode in modes for accum in grid.get("grad_accum", [NO_ACCUMULATION])]
    devices, accums = Scale.parse(scale).devices, []
    for sequences in grid["global_batch"]:
        if not str(batch).isdigit() or sequences % (int(batch) * devices):
            raise ConfigError(
                f"grid.global_batch: {sequences} sequences is not a whole number of micro-batches of "
                f"batch_per_device {batch} on scale {scale} ({devices} devices): exclude the cell or change one"
            )
        accums.append(sequences // (int(batch) * devices))
    return [(mode, accum) for mode in modes for accum in accums]


def planned_cells(grid: dict):
    """Every cell of the grid its exclude/only rules keep, in the grid's order."""
    combos = itertools.product(
        grid["frameworks"], grid["models"], grid["precision"], grid["data"], grid["batch_per_device"], grid["scales"]
    )
    for fw, model, precision, data, batch, scale in combos:
        strategies = [SINGLE_DEVICE] if Scale.parse(scale).devices == 1 else grid["strategies"][fw]
        for strategy, (mode, accum) in itertools.product(strategies, cell_training_options(grid, batch, scale)):
            for schedule, microbatches in cell_pipeline_options(grid, fw, strategy, batch, scale):
                cell = CellKey(
                    fw, model, precision, data, str(batch), scale, strategy, mode, accum, schedule, microbatches
                )
                if _kept(grid, cell):
                    yield cell


def _kept(grid: dict, cell: CellKey) -> bool:
    """The grid's exclude/only rules keep `cell`."""
    values = cell.as_dict()
    if any(_matches(rule, values) for rule in grid.get("exclude", [])):
        return False
    return not grid.get("only") or any(_matches(rule, values) for rule in grid["only"])


# Looked up once per framework, strategy and scale, not once per cell.
_strategy_unavailable = functools.cache(strategy_unavailable)


def why_unavailable(config: dict, cell: CellKey) -> str | None:
    """Why `cell` cannot run here (an N/A cell kept in the tables with its reason), or None."""
    return _why_not(config, cell) or _unfit(config, cell)


def _why_not(config: dict, cell: CellKey) -> str | None:
    """Why `cell` cannot run here, its memory aside."""
    fw, model, device = cell.framework, cell.model, config.get("run", {}).get("device", "cpu")
    caps = capabilities(fw)
    # A framework with no build for run.device (no CUDA wheel for this Python...).
    why = device_unavailable(fw, device)
    if not why and model not in caps.models:
        why = caps.unavailable_models.get(model, f"{fw} has no {model} model")
    run, options = config.get("run", {}), config.get("framework_options", {}).get(fw)
    why = why or caps.precision_unavailable(cell.precision, device, run.get("gpu_type") or "", options)
    why = why or caps.data_unavailable(cell.data, model)
    # A strategy that cannot run here (single-node strategy at a multi-node scale, NCCL on a
    # CPU, a package that does not build) stays in the grid with its reason.
    if not why and cell.strategy != SINGLE_DEVICE:
        why = (
            _strategy_unavailable(fw, cell.strategy, cell.scale, device)
            or caps.strategy(cell.strategy).model_unavailable(model)
            or _tensor_parallel_problem(fw, cell.strategy, model, cell.scale)
            or _pipeline_problem(fw, cell)
        )
    return why or training_option_unavailable(fw, model, cell.activation_checkpointing, cell.grad_accum)


def expand(config: dict) -> Grid:
    check_semantics(config)
    return expand_checked(config)


def expand_checked(config: dict) -> Grid:
    """`expand` of a config whose cross-references check_semantics has passed."""
    proto = protocols.resolve(config["protocol"])
    runs: list[RunCoords] = []
    unavailable: dict[CellKey, str] = {}
    for cell in planned_cells(config["grid"]):
        why = why_unavailable(config, cell)
        if why:
            unavailable[cell] = why
            continue
        runs.extend(RunCoords(**cell.as_dict(), repeat=r) for r in range(1, protocols.planned_repeats(proto) + 1))
    profiled = [] if not config.get("profile") else sorted({r.with_(repeat=PROFILE_REPEAT) for r in runs})
    return Grid(runs=runs, unavailable=unavailable, protocol=proto, profiled=profiled)


def unavailable_lines(experiment: Grid, limit: int = 20) -> list[str]:
    """What planning tells before anything runs: the N/A cells, grouped by their reason, each
    reason once with its count and up to `limit` of its cells."""
    if not experiment.unavailable:
        return []
    by_reason: dict[str, list[CellKey]] = {}
    for cell, why in sorted(experiment.unavailable.items()):
        by_reason.setdefault(why, []).append(cell)
    lines = [f"{len(experiment.unavailable)} cell(s) N/A before anything runs (their reasons are in cells.csv):"]
    for why, cells in by_reason.items():
        named = [
            f"{c.framework} {c.model} {c.precision} {c.data} bs{c.batch} {c.scale} {c.strategy}{c.training}"
            for c in cells
        ]
        if len(named) == 1:
            lines.append(f"  {named[0]}: {why}")
            continue
        more = f" and {len(named) - limit} more" if len(named) > limit else ""
        lines.append(f"  {len(cells)} cells: {why}")
        lines.append(f"    ({'; '.join(named[:limit])}{more})")
    return lines
