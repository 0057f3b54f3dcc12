#!/usr/bin/env bash
# Creates the project-local virtual environment .venv with the Python packages
# the tests use as independent references (tests/requirements.txt). Does
# nothing when it is already up to date.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv"
req="$root/tests/requirements.txt"
stamp="$venv/.requirements.sha256"

want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
echo "venv: installing test packages into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
echo "$want" >"$stamp"
