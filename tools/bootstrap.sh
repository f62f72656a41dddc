#!/usr/bin/env bash
# Set up the analysis environment (.venvs/analysis: Snakemake, pandas, matplotlib, pytest…)
# from its hash lock on a fresh machine. Idempotent; a no-op when the lock is unchanged.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
command -v python3 >/dev/null || { echo "bootstrap: python3 (3.10+) is required" >&2; exit 1; }
mkdir -p .venvs
# The six environments take ≈ 10 GB (PyTorch's CUDA wheels 5.7 GB): say so before pip fails.
free_gb=$(df -Pk . | awk 'NR == 2 {print int($4 / 1048576)}')
if [ "$free_gb" -lt 12 ] && [ ! -e .venvs/pytorch/lock.sha256 ]; then
    echo "bootstrap: only ${free_gb} GB free under $repo; the environments need about 12 GB" >&2
fi
bash workflow/scripts/build_env.sh envs/analysis.txt .venvs/analysis .venvs/analysis/.dlbench-env
# Make the dlbench package importable from Snakemake's scripts without installing it.
site=$(.venvs/analysis/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$repo" > "$site/dlbench.pth"
# Byte-compiled as pip compiles what it installs: every `snakemake` imports dlbench to plan, and
# PYTHONDONTWRITEBYTECODE (set on some hosts) stops Python from keeping what it compiled.
.venvs/analysis/bin/python -m compileall -q dlbench
