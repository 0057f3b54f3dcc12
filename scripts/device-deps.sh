#!/usr/bin/env bash
# scripts/device-deps.sh: unpacks the Debian packages the build needs that a
# bare GPU machine may lack (cJSON) into .devdeps/root, which
# scripts/gpu-check.sh adds to CMAKE_PREFIX_PATH. Run it here (it needs
# apt-get and the network), then carry .devdeps to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .devdeps/root
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download libcjson1 libcjson-dev >/dev/null 2>&1)
for f in "$tmp"/*.deb; do dpkg -x "$f" .devdeps/root; done
echo "unpacked into .devdeps/root: $(cd "$tmp" && ls *.deb | tr '\n' ' ')"
