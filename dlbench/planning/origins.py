"""Which config files a run reads, and where each of its settings came from.

One rule (README, Configuration): the grid files given (`--configfile`, in order, then
`--config`) are the whole experiment; what they leave unsaid comes from the protocol preset they
name, then from the schema's documented defaults. The embedded default grid (config/config.yaml)
is read only when no grid file is given. Origins are `FILE:LINE`, `--config`, `preset NAME` or
`schema default`."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Sequence

import yaml

from dlbench import protocol as protocols
from dlbench.planning.schema import REPO, schema_defaults
from dlbench.planning.snakemake_api import load_configfile, update_config

WORKDIR_DEFAULT = os.path.join("config", "config.yaml")
EMBEDDED_DEFAULT = os.path.join(REPO, WORKDIR_DEFAULT)
COMMAND_LINE = "--config"
SCHEMA_DEFAULT = "schema default"

Path_ = tuple  # a setting's keys from the top, e.g. ("protocol", "warmup_steps")


def config_files(grid_files: Sequence[str | os.PathLike], workdir: str | os.PathLike = ".") -> list[str]:
    """The files a run's config is made of: the grid files, else the working directory's
    config/config.yaml, else the embedded default beside the Snakefile."""
    if grid_files:
        return [os.fspath(f) for f in grid_files]
    local = os.path.normpath(os.path.join(workdir, WORKDIR_DEFAULT))
    return [local if os.path.exists(local) else EMBEDDED_DEFAULT]


def display_path(path: str) -> str:
    """A config file as origins name it: relative to the repository or the working directory
    where it lies below one, else whole."""
    full = os.path.abspath(path)
    for base in (os.getcwd(), REPO):
        if full.startswith(base + os.sep):
            return os.path.relpath(full, base)
    return full


def load(path: str) -> dict:
    """A config file as Snakemake loads it (JSON, else YAML)."""
    return load_configfile(path) or {}


def merge(target: dict, update: dict) -> dict:
    """`update` merged into `target` by Snakemake's own merge of config files and --config."""
    update_config(target, copy.deepcopy(update))
    return target


def merged(files: Iterable[str], overrides: dict | None = None) -> dict:
    config: dict = {}
    for path in files:
        merge(config, load(path))
    return merge(config, overrides or {})


def _file_origins(path: str) -> dict[Path_, str]:
    """Every setting a YAML or JSON file makes (a mapping's leaves, a list whole), with its line."""
    with open(path, encoding="utf-8") as f:
        node = yaml.compose(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    found: dict[Path_, str] = {}

    def walk(node, keys: Path_, line: int) -> None:
        if isinstance(node, yaml.MappingNode) and (keys == () or node.value):
            for key_node, value_node in node.value:
                walk(value_node, (*keys, key_node.value), key_node.start_mark.line + 1)
        elif keys:  # a setting's line is its key's
            found[keys] = f"{display_path(path)}:{line}"

    if node is not None:
        walk(node, (), 0)
    return found


def _leaves(mapping: dict, keys: Path_ = ()) -> Iterable[Path_]:
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*keys, key))
        else:
            yield (*keys, key)


def _set_origins(origins: dict[Path_, str], made: dict[Path_, str]) -> None:
    """Later settings replace earlier ones at their path and everything under it."""
    for keys, where in made.items():
        for old in [k for k in origins if k[: len(keys)] == keys]:
            del origins[old]
        origins[keys] = where


def origins(files: Sequence[str], overrides: dict | None, config: dict) -> dict[Path_, str]:
    """Where each leaf setting of `config` (the merged config, schema defaults filled) came from.
    The protocol's preset values are added under ("protocol", KEY) as `preset NAME`."""
    found: dict[Path_, str] = {}
    for path in files:
        _set_origins(found, _file_origins(path))
    _set_origins(found, {keys: COMMAND_LINE for keys in _leaves(overrides or {})})
    result = {keys: _origin_of(found, keys) for keys in _leaves(config)}
    preset = config.get("protocol", {}).get("preset")
    for key in protocols.PRESETS.get(preset, {}):
        result.setdefault(("protocol", key), f"preset {preset}")
    return result


def _origin_of(found: dict[Path_, str], keys: Path_) -> str:
    for n in range(len(keys), 0, -1):  # a list or mapping set whole names its own line
        if keys[:n] in found:
            return found[keys[:n]]
    return SCHEMA_DEFAULT


def effective(config: dict) -> dict[Path_, object]:
    """Every leaf setting of a filled config, the protocol as its preset resolves it."""
    values = {keys: _get(config, keys) for keys in _leaves(config)}
    resolved = protocols.resolve(config["protocol"])
    for key in protocols.PRESETS[resolved["preset"]]:
        values[("protocol", key)] = resolved[key]
    return values


def _get(config: dict, keys: Path_):
    for key in keys:
        config = config[key]
    return config


def dotted(keys: Path_) -> str:
    return ".".join(str(k) for k in keys)


def where(message: str, found: dict[Path_, str]) -> str:
    """`message` (a config problem starting `KEY.PATH[i]: ...`) prefixed with the file and line
    that set KEY.PATH, where one did (or set the unknown key the message names under it)."""
    head = message.split(":", 1)[0].split("[", 1)[0]
    keys = tuple(head.split(".")) if head and " " not in head else ()
    origin = _origin_of(found, keys) if keys else SCHEMA_DEFAULT
    if origin == SCHEMA_DEFAULT:
        named = [k for k in found if len(k) > len(keys) and k[: len(keys)] == keys and f"'{k[len(keys)]}'" in message]
        origin = found[named[0]] if named else SCHEMA_DEFAULT
    return message if origin == SCHEMA_DEFAULT else f"{origin}: {message}"


def departures(config: dict, found: dict[Path_, str]) -> list[tuple[str, object, str]]:
    """(setting, value, origin) of every setting outside `grid` whose value is neither its
    preset's nor its schema default: what the plan summary, campaign.json and the report's
    method section show."""
    values = effective(config)
    preset = protocols.PRESETS[values[("protocol", "preset")]]
    rows = []
    for keys in sorted(found, key=dotted):
        if keys[0] == "grid" or keys[:2] in UNRECORDED or not _set_by_hand(found[keys]):
            continue
        usual = preset[keys[1]] if keys[0] == "protocol" and keys[1] in preset else _schema_default(keys)
        if values[keys] != usual:
            rows.append((dotted(keys), values[keys], found[keys]))
    return rows


_NO_DEFAULT = object()
# Not departures: the preset (the protocol's own line says it), and a site's interpreters (the
# environment table names them; a regenerated campaign drops them).
UNRECORDED = (("protocol", "preset"), ("run", "python"))


def recorded(files: Sequence[str], overrides: dict | None, config: dict) -> list[dict]:
    """The departures as campaign.json keeps them: origins name a file by its base name, the
    same wherever the campaign's config files lie."""
    found = origins(files, overrides, config)
    return [
        {"setting": key, "value": value, "origin": os.path.basename(origin)}
        for key, value, origin in departures(config, found)
    ]


def _set_by_hand(origin: str) -> bool:
    """Set in a file or on the command line: neither the preset's nor the schema's default."""
    return origin != SCHEMA_DEFAULT and not origin.startswith("preset ")


def _schema_default(keys: Path_):
    try:
        return schema_defaults(*keys[:-1]).get(keys[-1], _NO_DEFAULT)
    except (KeyError, TypeError):  # under a free-form mapping (framework_options, run.python)
        return _NO_DEFAULT


def show_lines(files: Sequence[str], overrides: dict | None, config: dict) -> list[str]:
    """The effective config, one setting a line: key, value, origin."""
    found = origins(files, overrides, config)
    values = effective(config)
    rows = [(dotted(keys), value_text(values[keys]), found[keys]) for keys in sorted(values, key=dotted)]
    key_width = max(len(r[0]) for r in rows)
    value_width = min(40, max(len(r[1]) for r in rows))
    lines = [f"# the effective config of {', '.join(files)}" + (" and --config" if overrides else "")]
    return lines + [f"{k:<{key_width}}  {v:<{value_width}}  {o}" for k, v, o in rows]


def value_text(value) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
