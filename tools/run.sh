#!/usr/bin/env bash
# README command (1): set up, then run the embedded default grid end to end to the report.
# Extra arguments go to Snakemake (e.g. --configfile config/grids/caict2020.yaml).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash tools/bootstrap.sh
# Config files that do not parse, named with file:line:column (Snakemake's message names neither).
.venvs/analysis/bin/python -m dlbench.planning.config check config/config.yaml -- "$@"
.venvs/analysis/bin/snakemake --profile profiles/local "$@"
# A dry run has nothing to bundle: Snakemake's --report needs the outputs to exist.
# The working directory: the repository, or --directory DIR (a grid's own place, docs/workdir.md).
workdir=$repo previous=
for arg in "$@"; do
    case "$arg" in --dry-run | --dryrun | -n* | -[!-]*n*) exit 0 ;; esac
    case "$previous" in --directory | -d) workdir=$(cd "$arg" && pwd) ;; esac
    case "$arg" in --directory=*) workdir=$(cd "${arg#*=}" && pwd) ;; esac
    previous=$arg
done
DLBENCH_PLAN_SUMMARY=0 .venvs/analysis/bin/snakemake --profile profiles/local --report results/report/snakemake-report.html "$@"
echo "Report: $workdir/results/report/index.html (tables: results/tables/, figures: results/figures/)"
