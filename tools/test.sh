#!/usr/bin/env bash
# README command (2): set up everything the tests need on a fresh machine, then run them.
# Extra arguments go to pytest (e.g. -m "not slow").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash tools/bootstrap.sh
# Headless Chromium for the report's browser test (tests/test_report_browser.py).
bash tools/install-chromium.sh
# The framework environments, through the same rule the pipeline uses.
.venvs/analysis/bin/snakemake --quiet rules --profile profiles/local frameworks_envs
# The one-host Slurm cluster for tests/test_slurm.py (needs root; its tests skip without it).
if [ "$(id -u)" = 0 ]; then
    bash tools/slurm-local/up.sh || echo "[test] no local Slurm cluster: tests marked slurm will skip" >&2
fi
exec .venvs/analysis/bin/python -m pytest -ra "$@"
