#!/usr/bin/env bash
# build_env.sh LOCK VENV STAMP — build VENV from the hash-locked LOCK unless it already
# holds exactly that lock; write the lock's sha256 to STAMP.
# VENV/lock.sha256 says the build finished: it is removed before anything else and written
# last, so a build or removal cut short (killed pip, full disk) is rebuilt by the next run
# (docs/reliability.md). Both it and STAMP are written whole or not at all.
set -euo pipefail
lock=$1 venv=$2 stamp=$3
want=$(sha256sum "$lock" | cut -d' ' -f1)
built=$venv/lock.sha256

write_whole() { # TEXT FILE
    printf '%s\n' "$1" >"$2.partial.$$"
    mv -f "$2.partial.$$" "$2"
}

if [ -x "$venv/bin/python" ] && [ "$(cat "$built" 2>/dev/null)" = "$want" ]; then
    echo "$venv already matches $lock ($want)"
else
    if [ -e "$venv" ]; then
        echo "$venv does not hold $lock ($want), or its build did not finish: rebuilding it"
    fi
    rm -f "$built" "$stamp"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --require-hashes --no-deps -r "$lock"
    write_whole "$want" "$built"
fi
write_whole "$want" "$stamp"
