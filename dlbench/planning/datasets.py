"""Where each dataset lives for a config, and the files a real-data train job needs. Stdlib only
at import; the settings read the config schema's defaults.

    results/data/images/generated-<id>/   the generated ImageNet layout (data.images.source: null)
    results/data/tfrecord/<id>/           TFRecord shards + manifest.json
    results/data/imagefolder/<id>/        ImageFolder root: <split> links + manifest.json
    results/data/recordio/<id>/           <split>.rec/.idx/.lst + manifest.json
    results/data/text/bert-<id>/          examples.npz, vocab.txt (+ corpus.txt) + manifest.json
    results/data/tokens/<id>/             tokens.npy + manifest.json (the LLMs' packed bytes)

A framework's image format is its capabilities' `image_format`; a format is converted in the
environment of the framework whose capabilities list it in `converts` (format "bert": the text).
The LLMs' tokens (format "tokens", dlbench.data.tokens: stdlib + numpy) are packed in the
analysis environment, and every framework reads the same file.

<id> is `generated-<hash>` or `imagenet-<hash>` (a configured source), the hash covering
every `data.images` setting (a configured source by its absolute path), so a changed
setting is a new directory instead of a stale one; the text id covers `data.text` and the
sequence length; the tokens id covers the corpus and the LLM sequence length. Paths are
relative to the working directory, as Snakemake's are.

For the train rule (real data): `train_data_inputs(framework, model, config)`; for the
runner: `dataset_path(framework, kind, config)` (a model kind's name: its descriptor,
dlbench.model_kinds, says the format it reads); for the conversion rules: `format_files(fmt, config)`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable

from dlbench.data.tfrecord import tfrecord_shards
from dlbench.model_kinds import KINDS, ModelKind
from dlbench.models import CATALOGUE, kind_of
from dlbench.planning.grid import planned_sizes
from dlbench.runners import capabilities, env_name, framework_names
from dlbench.runners.plugin import DATASET_FORMATS

DATA_ROOT = "results/data"
MANIFEST = "manifest.json"
TEXT_FORMAT = "bert"
TOKEN_FORMAT = "tokens"
# Every format data.smk has a conversion rule for.
FORMATS = DATASET_FORMATS


def _section(config: dict, name: str) -> dict:
    """`data.<name>` over the schema's defaults (analysis environment only: reads the schema)."""
    from dlbench.planning.schema import schema_defaults  # yaml: not in every framework environment

    settings = schema_defaults("data", name)
    settings.update((config.get("data") or {}).get(name) or {})
    return settings


def image_settings(config: dict) -> dict:
    """`data.images` with defaults; `source` made absolute, `val_count` 0 without a val split."""
    settings = _section(config, "images")
    if settings["source"] is not None:
        settings["source"] = os.path.abspath(settings["source"])
    if "val" not in settings["splits"]:
        settings["val_count"] = 0
    return settings


def planned_seq_len(config: dict, fmt: str) -> int:
    """The sequence length the models reading format `fmt` train at (run.seq_len, else their
    default: dlbench.planning.grid.planned_sizes); the grid's models first, else the catalogue's."""
    readers = [m for m in CATALOGUE if kind_of(m).dataset_format == fmt]
    asked = [m for m in (config.get("grid") or {}).get("models", []) if m in readers] or readers
    lengths = sorted({planned_sizes(config.get("run") or {}, m)[1] for m in asked})
    if len(lengths) != 1:
        raise ValueError(f"the models reading {fmt!r} ({', '.join(asked)}) train at sequence lengths {lengths}")
    return lengths[0]


def text_settings(config: dict) -> dict:
    """`data.text` with defaults; seq_len 0 → the text models' planned sequence length."""
    settings = _section(config, "text")
    if not settings["seq_len"]:
        settings["seq_len"] = planned_seq_len(config, TEXT_FORMAT)
    if settings["corpus"] is not None:
        settings["corpus"] = os.path.abspath(settings["corpus"])
    return settings


def token_settings(config: dict) -> dict:
    """The LLM token file's settings: `data.text.corpus` (absolute; null: pydoc_data) and the
    sequence length the models reading it are planned at."""
    corpus = _section(config, "text")["corpus"]
    seq_len = planned_seq_len(config, TOKEN_FORMAT)
    return {"corpus": None if corpus is None else os.path.abspath(corpus), "seq_len": seq_len}


def _digest(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]


def images_id(config: dict) -> str:
    settings = image_settings(config)
    if settings["source"] is not None:  # the generator's settings do not apply
        for key in ("count", "val_count", "classes", "image_size", "quality"):
            settings.pop(key)
    return f"{'generated' if settings['source'] is None else 'imagenet'}-{_digest(settings)}"


def text_id(config: dict) -> str:
    return f"bert-{_digest(text_settings(config))}"


def tokens_id(config: dict) -> str:
    return f"bytes-{_digest(token_settings(config))}"


def generated_images_dir(config: dict) -> str:
    """Where the generator writes for this config (used only when data.images.source is null)."""
    return f"{DATA_ROOT}/images/{images_id(config)}"


def images_source(config: dict) -> str:
    """The ImageNet-layout directory the conversions read: the configured one or the generated."""
    source = image_settings(config)["source"]
    return source if source is not None else generated_images_dir(config)


def _kind(name: str) -> ModelKind:
    if name not in KINDS:
        raise ValueError(f"dataset kind {name!r}: expected a model kind, one of {', '.join(sorted(KINDS))}")
    return KINDS[name]


def dataset_format(framework: str, kind: str) -> str:
    """The dataset format a framework's real-data pipeline reads for model kind `kind`: the
    kind's own, or for images the framework's (its capabilities)."""
    descriptor = _kind(kind)
    if not descriptor.framework_images:
        if not descriptor.dataset_format:
            raise ValueError(f"model kind {kind!r} reads no dataset (ModelKind.dataset_format)")
        return descriptor.dataset_format
    if framework not in framework_names():
        raise ValueError(f"no dataset format for framework {framework!r} (known: {', '.join(framework_names())})")
    fmt = capabilities(framework).image_format
    if not fmt:
        raise ValueError(f"framework {framework!r} declares no image dataset format (Capabilities.image_format)")
    return fmt


def image_formats() -> list[str]:
    """The image formats some registered framework reads."""
    return sorted({capabilities(fw).image_format for fw in framework_names()} - {""})


def converter_env(fmt: str) -> str:
    """The environment a format is converted in: that of the framework that `converts` it."""
    for fw in framework_names():
        if fmt in capabilities(fw).converts:
            return env_name(fw)
    raise ValueError(f"no framework converts dataset format {fmt!r} (Capabilities.converts)")


def format_path(fmt: str, config: dict) -> str:
    """The directory of a converted dataset (see the module docstring)."""
    if fmt == TEXT_FORMAT:
        return f"{DATA_ROOT}/text/{text_id(config)}"
    if fmt == TOKEN_FORMAT:
        return f"{DATA_ROOT}/tokens/{tokens_id(config)}"
    return f"{DATA_ROOT}/{fmt}/{images_id(config)}"


def dataset_path(framework: str, kind: str, config: dict) -> str:
    """The directory a framework's real-data pipeline reads."""
    return format_path(dataset_format(framework, kind), config)


def format_files(fmt: str, config: dict) -> list[str]:
    """Every file the conversion to `fmt` writes (the rule's outputs), manifest last."""
    directory = format_path(fmt, config)
    if fmt == TOKEN_FORMAT:
        names = ["tokens.npy"]
    elif fmt == TEXT_FORMAT:
        names = ["examples.npz", "vocab.txt"] + (["corpus.txt"] if text_settings(config)["corpus"] is None else [])
    elif fmt == "tfrecord":
        settings = image_settings(config)
        counts = {"train": settings["shards"], "val": settings["val_shards"]}
        names = [name for split in settings["splits"] for name in tfrecord_shards(split, counts[split])]
    elif fmt == "recordio":
        names = [
            f"{split}{suffix}" for split in image_settings(config)["splits"] for suffix in (".rec", ".idx", ".lst")
        ]
    else:  # imagefolder: links to the source's split directories; the manifest vouches for them
        names = []
    return [f"{directory}/{name}" for name in [*names, MANIFEST]]


def dataset_files(framework: str, kind: str, config: dict) -> list[str]:
    """Every file of the dataset a framework reads for `kind`, manifest last."""
    return format_files(dataset_format(framework, kind), config)


def train_data_inputs(framework: str, model: str, config: dict) -> list[str]:
    """The Snakemake inputs of a `data: real` train job: its dataset's files (manifest last)."""
    return dataset_files(framework, kind_of(model).name, config)


def train_data_inputs_function(config: dict) -> Callable[[str, str], tuple[str, ...]]:
    """train_data_inputs for `config`, remembered per framework and model (asked per job)."""
    return functools.cache(lambda framework, model: tuple(train_data_inputs(framework, model, config)))


def config_problem(config: dict) -> str | None:
    """What the schema cannot say (relations between `data` keys), naming the key; else None."""
    images, text = image_settings(config), text_settings(config)
    if images["source"] is None:
        if images["count"] < images["classes"]:
            return (
                f"data.images.count: {images['count']} images cannot fill "
                f"data.images.classes: {images['classes']} (every class needs one)"
            )
        if "val" in images["splits"] and images["val_count"] < 1:
            return "data.images.val_count: must be at least 1 when data.images.splits has val"
    if text["seq_len"] < 8:
        return f"data.text.seq_len: {text['seq_len']} is too short for a sentence pair (at least 8)"
    if text["max_predictions"] > text["seq_len"] - 3:
        return f"data.text.max_predictions: {text['max_predictions']} exceeds seq_len - 3 ({text['seq_len'] - 3})"
    return None


def source_problem(config: dict) -> str | None:
    """A configured `data.images.source` that is not a readable ImageNet layout (the
    conversions would fail on it later, in a log file), naming the path; else None."""
    source = image_settings(config)["source"]
    if source is None:
        return None
    from dlbench.data import DataError, imagenet

    try:
        imagenet.class_names(source)
    except DataError as error:
        return f"data.images.source: {error}"
    return None
