#!/usr/bin/env bash
# A device run's archive (benchmarks/device_run.sh) → a committed measured campaign:
#   bash benchmarks/device/import_campaign.sh gpu_campaign.tar.gz campaigns/<name>
# keeps the raw step logs, the FLOPs counts and the config files, regenerates the tables,
# manifest and report from them (python -m dlbench.report regenerate), keeps stages.txt (how
# each stage of the device run ended), says which of the
# device pipeline's own tables differ from the regeneration, and checks that a second
# regeneration is byte-identical.
set -euo pipefail
archive=$(realpath "$1") dest=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-$repo/.venvs/analysis/bin/python}
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
tar -C "$unpacked" -xzf "$archive"
[ -e "$dest" ] && { echo "$dest exists: choose a new campaign directory" >&2; exit 1; }
mkdir -p "$dest/results"
cp -r "$unpacked/configs" "$dest/config"
cp -r "$unpacked/pipeline/results/runs" "$unpacked/pipeline/results/flops" "$dest/results/"
# How each stage of the device run ended (ok, exit status, TIMED OUT): a partial campaign says why.
[ -e "$unpacked/pipeline/stages.txt" ] && cp "$unpacked/pipeline/stages.txt" "$dest/stages.txt"
PYTHONPATH=$repo "$python" -m dlbench.report regenerate "$dest" --out "$dest" >/dev/null
for table in runs.csv cells.csv cells.md environment.json references.csv; do
    device=$unpacked/pipeline/results/tables/$table
    if [ ! -e "$device" ]; then
        echo "device pipeline made no $table"
    elif cmp -s "$device" "$dest/results/tables/$table"; then
        echo "$table: the device pipeline's and the regeneration are byte-identical"
    else
        echo "$table: DIFFERS from the device pipeline's"
    fi
done
PYTHONPATH=$repo "$python" -m dlbench.report regenerate "$dest"
