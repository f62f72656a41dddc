"""Writing records whole or not at all, and keeping an earlier attempt's files. Stdlib only
(the launcher and the data converters run in framework environments)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """`text` in `path` whole or not at all: a reader (Snakemake, the aggregator, a second
    invocation) never sees half a record. On an OSError nothing partial is left behind."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


def set_aside(run_dir: str | os.PathLike, files: list[Path], number: int) -> Path:
    """Move `files` of an earlier attempt to `run_dir/attempt<k>/` (k ≥ number, the first
    that does not exist yet): kept unchanged, never overwritten."""
    run_dir = Path(run_dir)
    target = run_dir / f"attempt{number}"
    while target.exists():
        number += 1
        target = run_dir / f"attempt{number}"
    target.mkdir()
    for path in files:
        os.replace(path, target / path.name)
    return target
