#!/usr/bin/env bash
# (Re)creates .whl/ in the repository root from benchmarks/device/wheels.txt, for the GPU
# machines' Python 3.12 (cp312 or py3-none-any, manylinux x86_64): one wheel per line, fetched
# here where the package registries answer, each checked against envs/analysis.txt's sha256
# hashes (a `# sdist` line: its sdist is checked, then built here into a pure-Python wheel).
# Stale wheels go: the new set replaces .whl/ whole, and only when every wheel came and checked.
# Usage: bash benchmarks/device/fetch_wheels.sh     (PYTHON=... picks the pip that fetches)
#        bash benchmarks/device/fetch_wheels.sh flax   (flax_reference.txt from envs/jax.txt
#        into .whl-flax/: transformers 4.57's Flax Llama, the JAX GPU check's reference)
#        bash benchmarks/device/fetch_wheels.sh torchao   (torchao.txt from envs/pytorch-cuda.txt
#        into .whl-torchao/: float8 training, the fp8 stage of device_run.sh --llm)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIST="$ROOT/benchmarks/device/wheels.txt" LOCK="$ROOT/envs/analysis.txt" DEST="$ROOT/.whl"
if [ "${1:-}" = flax ]; then
    LIST="$ROOT/benchmarks/device/flax_reference.txt" LOCK="$ROOT/envs/jax.txt" DEST="$ROOT/.whl-flax"
elif [ "${1:-}" = torchao ]; then
    LIST="$ROOT/benchmarks/device/torchao.txt" LOCK="$ROOT/envs/pytorch-cuda.txt" DEST="$ROOT/.whl-torchao"
fi
PYTHON=${PYTHON:-python3}
cd "$ROOT"

# The wheels stay out of git (the device tool carries them as ignored paths).
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$(basename "$DEST")/" "$exclude" 2>/dev/null || echo "/$(basename "$DEST")/" >>"$exclude"

wheels=() sdists=()
while IFS= read -r line; do
    pin=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' <<<"$line")
    [ -n "$pin" ] || continue
    if [[ $line =~ \#[[:space:]]*sdist ]]; then sdists+=("$pin"); else wheels+=("$pin"); fi
done <"$LIST"
total=$((${#wheels[@]} + ${#sdists[@]}))
[ "$total" -gt 0 ] || { echo "no pins in $LIST" >&2; exit 1; }

tmp=$(mktemp -d "$ROOT/.whl.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/sdist"
pip=("$PYTHON" -m pip --disable-pip-version-check -q)

if [ "${#wheels[@]}" -gt 0 ]; then
    "${pip[@]}" download --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d "$tmp" "${wheels[@]}"
fi
for pin in "${sdists[@]}"; do
    "${pip[@]}" download --no-deps --no-binary=:all: -d "$tmp/sdist" "$pin"
done

# Every file's sha256 must be one the lock lists for that name==version.
"$PYTHON" - "$LOCK" "$tmp" "$tmp/sdist" <<'PY'
import hashlib, pathlib, re, sys

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

lock, pin = {}, None
for line in pathlib.Path(sys.argv[1]).read_text().splitlines():
    if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
        pin = (norm(m[1]), m[2])
        lock[pin] = set()
    elif pin and (m := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
        lock[pin].add(m[1])
bad = []
for folder in sys.argv[2:]:
    for path in sorted(pathlib.Path(folder).glob("*")):
        if not path.is_file():
            continue
        stem = path.name.removesuffix(".whl").removesuffix(".tar.gz").removesuffix(".zip")
        if path.name.endswith(".whl"):
            name, version = stem.split("-")[:2]
        else:
            name, version = stem.rsplit("-", 1)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in lock.get((norm(name), version), ()):
            bad.append(f"{path.name}: sha256 {digest} is not {sys.argv[1]}'s for {name}=={version}")
if bad:
    sys.exit("\n".join(bad))
PY

# Built here from the checked sdists; pure Python only (a compiled one would be for this Python).
if [ "${#sdists[@]}" -gt 0 ]; then
    SOURCE_DATE_EPOCH=315532800 "${pip[@]}" wheel --no-deps -w "$tmp" "$tmp"/sdist/*
    for whl in "$tmp"/*.whl; do
        [[ $whl == *-py3-none-any.whl || $whl == *-py2.py3-none-any.whl || $whl == *-cp312-* ]] ||
            { echo "not for CPython 3.12: $(basename "$whl")" >&2; exit 1; }
    done
fi
rm -rf "$tmp/sdist"

# Exactly one wheel per pin, and no other: two versions of one package stop the install there.
count=$(find "$tmp" -maxdepth 1 -name '*.whl' | wc -l)
if [ "$count" -ne "$total" ]; then
    echo "expected $total wheels, got $count:" >&2
    ls "$tmp" >&2
    exit 1
fi
dups=$(find "$tmp" -maxdepth 1 -name '*.whl' -printf '%f\n' | cut -d- -f1 | tr 'A-Z.' 'a-z_' | sort | uniq -d)
[ -z "$dups" ] || { echo "more than one wheel of: $dups" >&2; exit 1; }

rm -rf "$DEST"
mv "$tmp" "$DEST"
chmod 755 "$DEST"
trap - EXIT

ls -1 "$DEST"
bytes=$(find "$DEST" -maxdepth 1 -name '*.whl' -printf '%s\n' | awk '{s += $1} END {print s}')
awk -v b="$bytes" -v n="$count" -v d="$(basename "$DEST")" 'BEGIN {printf "%d wheels in %s/: %.2f MiB\n", n, d, b / 1048576}'
