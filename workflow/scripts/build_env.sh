#!/usr/bin/env bash
# build_env.sh LOCK VENV STAMP — build VENV from the hash-locked LOCK unless it already
# holds exactly that lock; write the lock's sha256 to STAMP.
set -euo pipefail
lock=$1 venv=$2 stamp=$3
want=$(sha256sum "$lock" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/lock.sha256" 2>/dev/null)" = "$want" ]; then
    echo "$venv already matches $lock ($want)"
else
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --require-hashes --no-deps -r "$lock"
    echo "$want" > "$venv/lock.sha256"
fi
echo "$want" > "$stamp"
