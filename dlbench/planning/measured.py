"""What defines a measurement, and the refusal to serve a run measured under other settings.

A run's record (launch.json) makes Snakemake take the run as done, whatever the config asks
now. So before anything runs, every run of the grid that has one is compared, setting by
setting, with what its rank-0 step log's header recorded; where one differs, the workflow stops
with one message naming the setting, the runs and what to do. Refused rather than re-measured
in a place of its own: docs/workdir.md says why. Analysis environment.

Compared: the warm-up and measured steps, the image size (image models) or sequence
length (text and LLM models) the run trained at, threads per rank, device, compile, the
allocator, the framework's options, the environment lock's sha256 (or a site environment), the container
runtime and, for podman, the image's digest. Not compared: what does not change a measured
step (time limit, progress, run order, Slurm sizing) and the code (a commit does not re-measure).
A run without a readable header (its ranks never started) cannot be compared and is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from dlbench.coords import RunCoords
from dlbench.launch.container import image_name, lock_path
from dlbench.models import kind_of
from dlbench.planning.asked import model_size
from dlbench.runners import capabilities, run_layout
from dlbench.steplog import rank_log_name

# A setting the config cannot tell before the run (an image not built yet) or an older log lacks.
UNKNOWN = object()
SHOWN_RUNS = 3  # runs named per differing setting; the full list goes to REFUSED_LIST
REFUSED_LIST = "logs/refused-runs.txt"


def _size_setting(model: str) -> str:
    return f"run.{kind_of(model).size_field}"


def _normal(value):
    """Options as JSON keeps them (a header's lists and numbers compare equal to the config's)."""
    return json.loads(json.dumps(value, sort_keys=True))


def _lock_text(name: str | None, sha256: str | None):
    """How a run's environment is named: its lock's file and sha256, or a site environment."""
    if name is None and sha256 is None:
        return "site environment"
    return f"{os.path.basename(name or '?')} sha256 {sha256[:12]}" if sha256 else UNKNOWN


def recorded(header: dict) -> dict:
    """The settings a run was measured with, from its rank-0 step log's header (UNKNOWN for
    what it does not record: a log older than the field)."""
    protocol, provenance = header.get("protocol") or {}, header.get("provenance") or {}
    container = provenance.get("container")
    runtime = "none" if not container else container.get("runtime", "apptainer (--sdm)")
    if "container" not in provenance:
        runtime = UNKNOWN
    lock = UNKNOWN
    if "env_lock_sha256" in provenance:
        lock = _lock_text(provenance.get("env_lock"), provenance["env_lock_sha256"])
    options = (header.get("framework") or {}).get("options", UNKNOWN)
    if options is not UNKNOWN:
        # An option its framework declared after the run ran at its default (a new option keeps
        # what ran before it the same: PyTorch's fp8_emulation, false).
        options = {**_declared_defaults(header["run"]["framework"]), **options}
    size = _size_setting(header["run"]["model"])
    return {
        "protocol.warmup_steps": protocol.get("warmup_steps", UNKNOWN),
        "protocol.measured_steps": protocol.get("measured_steps", UNKNOWN),
        size: header.get(size.removeprefix("run."), UNKNOWN),
        "run.threads (per rank)": header.get("threads", UNKNOWN),
        "run.device": header.get("device", UNKNOWN),
        "run.compile": header.get("compile", UNKNOWN),
        # A log older than the field ran with the C library's: dlbench preloaded nothing then.
        "run.allocator": (header.get("allocator") or {}).get("name", "system"),
        "framework_options": UNKNOWN if options is UNKNOWN else _normal(options),
        "environment lock": lock,
        "run.container": runtime,
        "image digest": ((container or {}).get("digest") or UNKNOWN) if runtime == "podman" else UNKNOWN,
    }


def _declared_defaults(framework: str) -> dict:
    try:
        return capabilities(framework).option_values()
    except KeyError:  # a framework this checkout does not know: its header as it is
        return {}


class Asked:
    """The settings the config asks of a run, per framework, model and layout (cached).
    `deploy`: the invocation's planning.deployment.Deployment."""

    def __init__(self, config: dict, deploy, protocol: dict):
        self.config, self.deploy, self.protocol = config, deploy, protocol
        self._cache: dict[tuple, dict] = {}
        self._lock_sha: dict[str, str] = {}

    def __call__(self, run: RunCoords) -> dict:
        key = (run.framework, run.model, run.strategy, run.scale)
        if key not in self._cache:
            self._cache[key] = self._settings(run)
        return self._cache[key]

    def _settings(self, run: RunCoords) -> dict:
        config, deploy = self.config["run"], self.deploy
        caps = capabilities(run.framework)
        options = self.config.get("framework_options", {}).get(run.framework)
        runtime = deploy.runtime if deploy.runtime != "none" else "apptainer (--sdm)" if deploy.apptainer else "none"
        return {
            "protocol.warmup_steps": self.protocol["warmup_steps"],
            "protocol.measured_steps": self.protocol["measured_steps"],
            **{f"run.{name}": value for name, value in model_size(run.model, config).items()},
            "run.threads (per rank)": max(1, config["threads"] // max(1, run_layout(run).tasks_per_node)),
            "run.device": config["device"],
            "run.compile": config["compile"],
            "run.allocator": config["allocator"],
            "framework_options": _normal(caps.parse_options(caps.options_text(options))),
            "environment lock": self._lock(run),
            "run.container": runtime,
            "image digest": self._image_digest(run) if runtime == "podman" else UNKNOWN,
        }

    def _lock(self, run: RunCoords):
        wildcards = _Wildcards(run)
        lock = self.deploy.env_lock(wildcards)
        if lock is None:
            return "site environment"
        path = os.path.join(self.deploy.repo, "envs", os.path.basename(lock))  # the image's copy is this file
        if path not in self._lock_sha:
            try:
                self._lock_sha[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError:
                self._lock_sha[path] = ""
        return _lock_text(path, self._lock_sha[path])

    def _image_digest(self, run: RunCoords):
        try:
            pinned = json.loads(
                lock_path(self.deploy.image_store, image_name(run.framework, self.deploy.device)).read_text()
            )
        except (OSError, ValueError):
            return UNKNOWN  # built by this invocation: its runs are new ones
        return pinned.get("config_digest") or UNKNOWN


class _Wildcards:
    """A run's coordinates read as Snakemake's wildcards (deployment's functions take these)."""

    def __init__(self, run: RunCoords):
        self.__dict__.update({k: str(v) for k, v in vars(run).items()})


def header_of(run_dir: str | os.PathLike) -> dict | None:
    """The first record of a run's rank-0 step log, or None (no log, unreadable, not a header)."""
    try:
        with open(Path(run_dir) / rank_log_name(0), encoding="utf-8") as f:
            first = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return first if isinstance(first, dict) and first.get("type") == "header" and "run" in first else None


def differences(runs: Iterable[RunCoords], asked: Callable[[RunCoords], dict], root: str = ".") -> dict:
    """{(setting, measured, asked): [run directories]} of the `runs` (those with a record)
    whose header differs from what is asked."""
    found: dict[tuple, list[str]] = {}
    for run in runs:
        header = header_of(Path(root) / run.run_dir)
        if header is None:
            continue
        want = asked(run)
        for setting, value in recorded(header).items():
            if setting in want and UNKNOWN not in (value, want[setting]) and value != want[setting]:
                found.setdefault((setting, _shown(value), _shown(want[setting])), []).append(run.run_dir)
    return found


def _shown(value) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list, bool)) else str(value)


def refusal(found: dict) -> str:
    """The one message for `differences()`'s result ('' when there are none)."""
    if not found:
        return ""
    runs = sorted({run for dirs in found.values() for run in dirs})
    lines = [f"{len(runs)} run(s) of this grid were measured under other settings than the config asks now:"]
    for (setting, measured, asked), dirs in sorted(found.items()):
        shown = ", ".join(dirs[:SHOWN_RUNS]) + (f" and {len(dirs) - SHOWN_RUNS} more" if len(dirs) > SHOWN_RUNS else "")
        lines.append(f"  {setting}: measured {measured}, the config asks {asked}: {len(dirs)} run(s): {shown}")
    lines += [
        f"Nothing was run; their raw logs are never overwritten (all of them: {REFUSED_LIST}). Either",
        "  - measure under the new settings in a working directory of its own: add --directory DIR, or",
        "  - move these runs aside first (e.g. mv results/runs results/runs-before), or",
        "  - ask for the settings they were measured under, to report them again (docs/workdir.md).",
    ]
    return "\n".join(lines)


def write_refused(found: dict, path: str = REFUSED_LIST) -> None:
    """Every refused run with its differing settings, one line each."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    by_run: dict[str, list[str]] = {}
    for (setting, measured, asked), dirs in sorted(found.items()):
        for run in dirs:
            by_run.setdefault(run, []).append(f"{setting}: {measured} -> {asked}")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{run}\t{'; '.join(why)}\n" for run, why in sorted(by_run.items()))
