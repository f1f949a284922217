#!/usr/bin/env bash
# Create or update one lane's virtualenv. A lane is a software stack the suite runs on:
#   pair     torch 2.2.1 with DGL 2.1.0 and PyG (the only pair that puts both frameworks on the
#            package index's torch); .venv, from requirements/pair/lock.txt. The default.
#   current  the newest torch that PyG tests, PyG only; .venv-current, requirements/current/.
#   own      the Python you name (PYTHON=...), with its packages visible: a torch it already has
#            (a CUDA build on a GPU node) is reused, and only what is missing is installed.
# Does nothing when the environment already matches its lock (a stamp holds the inputs' hash).
# torch-scatter/torch-sparse compile against the lane's torch into a wheelhouse of that torch's
# own: pip's wheel cache keys a source build by name and version only, and would hand a wheel
# built for one torch to another ("undefined symbol" at import).
set -euo pipefail
cd "$(dirname "$0")/.."
LANE=${LANE:-pair}
case "$LANE" in
    pair) VENV=${VENV:-.venv}; REQ=requirements/pair; PYTHON=${PYTHON:-python3.11} ;;
    current) VENV=${VENV:-.venv-current}; REQ=requirements/current; PYTHON=${PYTHON:-python3.11} ;;
    own) VENV=${VENV:-.venv-own}; REQ=requirements/current; PYTHON=${PYTHON:-python3} ;;
    *) echo "setup: unknown LANE '$LANE'; allowed: pair, current, own" >&2; exit 2 ;;
esac
LOCK=$REQ/lock.txt
STAMP="$VENV/.gnnscale-setup"
want=$( (cat "$REQ/top.txt" "$REQ/source-build.txt" scripts/setup.sh scripts/lane_manifest.py; cat "$LOCK" 2>/dev/null || true; echo "$LANE $PYTHON") | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
    exit 0
fi
if ! command -v "$PYTHON" >/dev/null; then
    echo "setup: $PYTHON not found; lane $LANE needs it (set PYTHON=/path/to/python)" >&2
    exit 1
fi
# Free disk before pip starts: on a full disk pip stops mid-download with "Connection
# interrupted", a network error that hides the cause. pip keeps every wheel of the lane in its
# temp dir until it installs them (about 3 GB for the CUDA builds of torch and its nvidia
# libraries); a new lane then holds 5.1-5.5 GB (pair, current, measured). An update in place
# needs the downloads only. GNNSCALE_SETUP_NEED_GB replaces the lane's figure; 0 skips the check.
free_gb() { df -Pk "$1" | awk 'NR==2 {printf "%.1f", $4 / 1048576}'; }
existing() { local d=$1; while [ ! -d "$d" ]; do d=$(dirname "$d"); done; echo "$d"; }
case "$LANE" in own) lane_gb=1; download_gb=1 ;; *) lane_gb=6; download_gb=3 ;; esac
[ ! -x "$VENV/bin/python" ] || lane_gb=1
lane_gb=${GNNSCALE_SETUP_NEED_GB:-$lane_gb}
if [ "$lane_gb" != 0 ]; then
    venv_dir=$(existing "$VENV")
    tmp_dir=$("$PYTHON" -c 'import tempfile; print(tempfile.gettempdir())')
    if [ "$(stat -c %d "$venv_dir")" = "$(stat -c %d "$tmp_dir")" ]; then
        checks=("$venv_dir:$(( lane_gb + download_gb )):the lane's environment $VENV and pip's downloads in $tmp_dir")
    else
        checks=("$venv_dir:$lane_gb:the lane's environment $VENV" "$tmp_dir:$download_gb:pip's downloads (temp dir; TMPDIR moves it)")
    fi
    for check in "${checks[@]}"; do
        dir=${check%%:*}; rest=${check#*:}; need=${rest%%:*}; what=${rest#*:}
        have=$(free_gb "$dir")
        if awk -v h="$have" -v n="$need" 'BEGIN {exit !(h < n)}'; then
            echo "setup: lane $LANE needs about $need GB free for $what; $dir has $have GB free." >&2
            echo "setup: free some space there (or set VENV=... / TMPDIR=... elsewhere); GNNSCALE_SETUP_NEED_GB=N sets the need, 0 skips this check" >&2
            exit 1
        fi
    done
fi
start=$(date +%s)
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
names() { grep -v '^\s*#' "$1" | sed 's/\[.*//; s/\s*$//' | grep -v '^$'; }
if [ "$LANE" = own ]; then
    if [ ! -x "$PY" ]; then
        # A Python without ensurepip (a GPU image's venv made by uv) still lends its own pip.
        nopip=(); "$PYTHON" -c 'import ensurepip' 2>/dev/null || nopip=(--without-pip)
        "$PYTHON" -m venv --system-site-packages "${nopip[@]}" "$VENV"
        # --system-site-packages shows the base interpreter's packages only. When PYTHON is itself a
        # virtualenv (a GPU image's /opt/torch/.venv), its torch lives in that venv's site-packages,
        # which a .pth in the lane's own site-packages adds after the lane's own packages.
        "$PYTHON" scripts/lane_manifest.py venv-sites > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gnnscale-own-python.pth"
    fi
    # What the Python already has is kept: pinned to its own version so pip leaves it alone.
    CONSTRAINTS=$(mktemp)
    trap 'rm -f "$CONSTRAINTS"' EXIT
    "$PY" scripts/lane_manifest.py own-constraints "$LOCK" > "$CONSTRAINTS"
    missing=$("$PY" scripts/lane_manifest.py missing "$REQ/top.txt")
    [ -z "$missing" ] || "${PIP[@]}" install -q -c "$CONSTRAINTS" $missing
else
    [ -x "$PY" ] || "$PYTHON" -m venv "$VENV"
    CONSTRAINTS=$LOCK
    if [ ! -f "$LOCK" ]; then
        echo "setup: $LOCK missing; installing the newest versions (pin them with: make lock LANE=$LANE)" >&2
        CONSTRAINTS=/dev/null
    fi
    pip_pin=$(grep -i '^pip==' "$CONSTRAINTS" || true)
    [ -z "$pip_pin" ] || "${PIP[@]}" install -q "$pip_pin"
    # Everything with a wheel first (the source builds need torch, ninja and wheel in place).
    "${PIP[@]}" install -q -c "$CONSTRAINTS" -r "$REQ/top.txt"
fi
missing_src=$("$PY" scripts/lane_manifest.py missing "$REQ/source-build.txt")
if [ -n "$missing_src" ]; then
    torch_tag=$("$PY" -c 'import sys, torch; print(f"torch-{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}")')
    WHEELHOUSE=${GNNSCALE_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/gnnscale/wheelhouse}/$torch_tag
    mkdir -p "$WHEELHOUSE"
    if ! "${PIP[@]}" install -q --no-index --find-links "$WHEELHOUSE" -c "$CONSTRAINTS" $missing_src 2>/dev/null; then
        echo "setup: building $missing_src against $torch_tag (minutes; kept in $WHEELHOUSE)"
        # One pip per package, all at once: torch-scatter compiles its files one after another
        # (no ninja), torch-sparse two at a time (ninja, MAX_JOBS), so side by side they keep
        # every core busy; one pip for both left a core idle for a third of the build.
        pids=()
        for pkg in $missing_src; do
            MAX_JOBS=${MAX_JOBS:-$(nproc)} "${PIP[@]}" wheel -q --no-cache-dir --no-build-isolation --no-deps \
                -c "$CONSTRAINTS" -w "$WHEELHOUSE" "$pkg" &
            pids+=($!)
        done
        failed=0
        for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
        [ "$failed" = 0 ] || { echo "setup: building $missing_src against $torch_tag failed (see above)" >&2; exit 1; }
        "${PIP[@]}" install -q --no-index --find-links "$WHEELHOUSE" -c "$CONSTRAINTS" $missing_src
    fi
fi
if [ "$LANE" = own ]; then
    # The Python's own packages are kept as they are, conflicts and all (a GPU image may carry some).
    "${PIP[@]}" check || echo "setup: pip check found conflicts among the packages of $PYTHON (above); the own lane keeps them" >&2
else
    "${PIP[@]}" check
fi
"$PY" scripts/lane_manifest.py write "$LANE" "$LOCK" "$REQ/top.txt" "$REQ/source-build.txt" > "$VENV/gnnscale-lane.json"
echo "$want" > "$STAMP"
echo "setup: lane $LANE ready in $VENV ($(( $(date +%s) - start )) s)"
