# Sourced by the scripts in this folder: makes .venv with regdev and the extras asked for.
# Usage: . scripts/_env.sh EXTRAS   (EXTRAS e.g. "dev"; "" for the runtime only)
# Re-installs only when pyproject.toml changed or new extras are asked for. A .venv that
# cannot install (no python, or no pip: an earlier setup was interrupted, or the system's
# venv module is incomplete) is removed and made again. Ctrl-C during setup prints one line,
# not a traceback, and the next run takes the setup up again.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
extras="${1:-}"

pick_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3 python; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    echo "regdev: needs Python 3.11 or newer on PATH (or set PYTHON=/path/to/python3.11)" >&2
    return 1
}

setup_interrupted() {
    trap - INT TERM HUP
    echo "regdev: setup interrupted; the next run takes it up again" >&2
    exit 130
}

# A usable environment: its python runs and has pip. `python -m venv` installs pip last
# (ensurepip), so a setup interrupted there leaves a .venv without it.
venv_works() {
    "$VENV/bin/python" -m pip --version >/dev/null 2>&1
}

stamp_file="$VENV/.regdev-installed${extras:+-$extras}"
want="$(cksum < "$ROOT/pyproject.toml")"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp_file" 2>/dev/null)" != "$want" ]; then
    # Ctrl-C (or a hang-up) reaches the tools below too; they die with a traceback that
    # their captured output keeps from the terminal, and this says what happened instead.
    trap setup_interrupted INT TERM HUP
    python="$(pick_python)"
    if { [ -e "$VENV" ] || [ -L "$VENV" ]; } && ! venv_works; then
        echo "regdev: $VENV is incomplete (no working pip: an earlier setup was interrupted?);" \
             "making it again" >&2
        rm -rf "$VENV"
    fi
    echo "regdev: setting up $VENV with $("$python" --version 2>&1) (first run takes a minute)..." >&2
    if [ ! -e "$VENV" ]; then
        if ! made="$("$python" -m venv "$VENV" 2>&1)"; then
            printf '%s\n' "$made" | tail -n 30 >&2
            rm -rf "$VENV"  # half made: the next run starts afresh
            echo "regdev: could not create $VENV with $python (its output is above)" >&2
            exit 2
        fi
    fi
    if ! "$VENV/bin/python" -m pip install --disable-pip-version-check \
            -e "$ROOT${extras:+[$extras]}" >"$VENV/pip.log" 2>&1; then
        tail -n 30 "$VENV/pip.log" >&2
        echo "regdev: pip install failed; the full log is $VENV/pip.log" >&2
        exit 2
    fi
    echo "$want" > "$stamp_file"
    trap - INT TERM HUP
    echo "regdev: environment ready." >&2
fi
