#!/usr/bin/env bash
# Create or update the project's virtualenv (.venv, or $VENV) from requirements/lock.txt.
# Does nothing when the environment already matches the lock (a stamp holds the lock's hash).
# The torch-scatter/torch-sparse source build runs in parallel (ninja) and lands in pip's
# wheel cache, so a re-created environment reuses the built wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3.11}
LOCK=requirements/lock.txt
STAMP="$VENV/.gnnscale-setup"
want=$(cat "$LOCK" requirements/top.txt requirements/source-build.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    exit 0
fi
if ! command -v "$PYTHON" >/dev/null; then
    echo "setup: $PYTHON not found; the suite needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q "$(grep -i '^pip==' "$LOCK")"
# Everything with a wheel first (the source builds need torch, ninja and wheel in place).
"${PIP[@]}" install -q -c "$LOCK" -r requirements/top.txt
MAX_JOBS=${MAX_JOBS:-$(nproc)} "${PIP[@]}" install -q --no-build-isolation -c "$LOCK" -r requirements/source-build.txt
"${PIP[@]}" check
echo "$want" > "$STAMP"
echo "setup: environment ready in $VENV ($(( $(date +%s) - start )) s)"
