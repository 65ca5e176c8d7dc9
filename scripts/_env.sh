# Sourced by the scripts in this folder: makes .venv with regdev and the extras asked for.
# Usage: . scripts/_env.sh EXTRAS   (EXTRAS e.g. "dev"; "" for the runtime only)
# Re-installs only when pyproject.toml changed or new extras are asked for.
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
    echo "regdev needs Python 3.11 or newer on PATH (or set PYTHON=/path/to/python3.11)" >&2
    return 1
}

stamp_file="$VENV/.regdev-installed${extras:+-$extras}"
want="$(cat "$ROOT/pyproject.toml" | cksum)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp_file" 2>/dev/null)" != "$want" ]; then
    python="$(pick_python)"
    echo "regdev: setting up $VENV with $("$python" --version) (first run takes a minute)..." >&2
    [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
    if ! "$VENV/bin/python" -m pip install --disable-pip-version-check \
            -e "$ROOT${extras:+[$extras]}" >"$VENV/pip.log" 2>&1; then
        tail -n 30 "$VENV/pip.log" >&2
        echo "regdev: pip install failed; the full log is $VENV/pip.log" >&2
        exit 2
    fi
    echo "$want" > "$stamp_file"
    echo "regdev: environment ready." >&2
fi
