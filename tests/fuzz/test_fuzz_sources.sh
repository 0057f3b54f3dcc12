#!/usr/bin/env bash
# tests/fuzz/test_fuzz_sources.sh OBJECT...: scripts/fuzz_sources.py against
# GNU ld. For each fuzz entry's object (as the replay programs compile it),
# the sources fuzz_sources.py names for scripts/fuzz.sh are the members of
# libignite_core.a that ld pulls in linking the entry against it (its map's
# "Archive member included" list), by file name. The replays' own
# fuzz_replay.c objects are passed too and left out. Needs this build's
# libignite_core.a (exits 77 with IGNITE_SHARED_CORE). Label unit, ~3 s.
set -euo pipefail

build=${IGNITE_BUILD_DIR:?}
lib=$build/libignite_core.a
if [ ! -f "$lib" ]; then
    echo "test_fuzz_sources: no $lib (a shared ignite_core); skipped" >&2
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 checked=0
for obj in "$@"; do
    case "$obj" in */fuzz_replay.c.o) continue ;; esac
    checked=$((checked + 1))
    # ld's warnings about a program that never runs are not the point
    if ! cc -nostdlib -Wl,-e,0 -Wl,--unresolved-symbols=ignore-all -o "$tmp/a.out" "$obj" "$lib" \
            -Wl,-Map="$tmp/map" 2>"$tmp/ld.err"; then
        echo "FAIL: $(basename "$obj"): ld: $(head -n 1 "$tmp/ld.err")" >&2
        failed=1
        continue
    fi
    ld_members=$(awk '/^Discarded input sections/ { exit } { print }' "$tmp/map" |
                 sed -n 's/^[^ ]*libignite_core\.a(\([^)]*\)\.o).*/\1/p' | sort -u)
    ours=$(python3 "$IGNITE_SOURCE_DIR/scripts/fuzz_sources.py" "$build" "$obj" |
           xargs -n1 basename | sort)
    if [ -z "$ours" ] || [ "$ours" != "$ld_members" ]; then
        echo "FAIL: $(basename "$obj"): fuzz_sources.py gives [$(echo $ours)]," \
             "ld pulls in [$(echo $ld_members)]" >&2
        failed=1
    fi
done
echo "test_fuzz_sources: $checked entries, $([ $failed = 0 ] && echo "all as ld" || echo "some differ")" >&2
[ "$checked" -gt 0 ] && exit $failed
echo "test_fuzz_sources: no entry objects given" >&2
exit 1
