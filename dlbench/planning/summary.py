"""The plan summary every dry run and every `tools/run.sh` starts with: what will run, by which
protocol, every setting that departs from its preset or the schema's default and where it came
from, what the grid will cost, and the cells that cannot run, with why."""

from __future__ import annotations

from dlbench import protocol as protocols
from dlbench.planning import cost, jobs, origins, packing
from dlbench.planning.grid import Grid, unavailable_lines


def plan_summary(grid: Grid, config: dict, found: dict, cost_lines: list[str]) -> list[str]:
    """The summary's lines (`found`: the config's origins, planning/origins.py; `cost_lines`:
    the cost estimate's, planning/cost.py)."""
    proto = grid.protocol
    cells = len({run.cell for run in grid.runs})
    repeats = "adaptive, from " if proto["repeats"] == "auto" else ""
    lines = [
        f"dlbench plan: {len(grid.runs)} runs in {cells} cells ({repeats}{protocols.planned_repeats(proto)} "
        f"repeats each), {len(grid.unavailable)} cells N/A; {len(grid.runs)} training jobs {slurm_jobs(grid, config)}",
        f"  protocol: preset {proto['preset']}, {proto['warmup_steps']} warm-up + {proto['measured_steps']} "
        f"measured steps, {proto['repeats']} repeats, {proto['statistic']} ({found[('protocol', 'preset')]})",
    ]
    changed = origins.departures(config, found)
    if changed:
        lines.append("  settings other than the preset's and the schema's defaults:")
        lines += [f"    {key} = {origins.value_text(value)}  ({origin})" for key, value, origin in changed]
    lines += [f"  {line}" for line in cost_lines]
    return lines + [f"  {line}" for line in grid.notes] + unavailable_lines(grid)


def slurm_jobs(grid: Grid, config: dict) -> str:
    """How the training jobs become Slurm jobs (slurm.runs_per_job, planning/packing.py)."""
    per_job = packing.runs_per_job(config)
    if per_job <= 1:
        return "(each its own Slurm job under a cluster profile)"
    shape_of = packing.shape_namer(lambda run: jobs.job_shape(run).rule_name)
    count = packing.job_count(grid.runs, shape_of, per_job)
    return f"in {count} Slurm jobs under a cluster profile (slurm.runs_per_job {per_job}: one after another)"


def planned_record(grid: Grid, config: dict, files: list[str], overrides: dict | None, repo: str) -> dict:
    """What planning knew, as campaign.json keeps it: the config's departures with their origins,
    and the grid's estimated cost (derive adds the hours measured beside it)."""
    estimate = cost.estimate(grid, config, repo)
    return {
        "settings": origins.recorded(files, overrides, config),
        "cost": {
            "unit": estimate.unit,
            "estimated_device_hours": round(estimate.device_hours, 4),
            "estimated_log_bytes": estimate.log_bytes,
            "runs_not_estimated": estimate.unestimated_runs,
        },
    }


def before_run(grid: Grid, config: dict, found, repo: str) -> list[str]:
    """The plan summary's lines, once the grid is within run.max_device_hours; else ValueError
    naming the limit, the file and line that set it, and the estimate (`found`: a callable
    giving the config's origins)."""
    estimate = cost.estimate(grid, config, repo)
    over = cost.budget_problem(estimate, config)
    if over:
        raise ValueError(origins.where(over, found()))
    return plan_summary(grid, config, found(), estimate.summary_lines())
