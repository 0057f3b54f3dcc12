#!/usr/bin/env python3
"""The sources of ignite_core a fuzz entry needs, for scripts/fuzz.sh:

    scripts/fuzz_sources.py BUILD_DIR ENTRY_OBJECT

prints, one a line and relative to the source root, the C sources whose
objects a static link of ENTRY_OBJECT against ignite_core would pull in: the
entry's undefined symbols, the objects that define them, their undefined
symbols in turn. The objects are BUILD_DIR's (the gcc build the tests run
in; the list of them is CMake's, from compile_commands.json), so a source
file split or added to ignite_core is found with no list to keep beside
CMake's. Symbols no object defines (libc, cJSON, the sanitizers') are left to
the link. Exits 2 with one line on stderr where the build is missing or
not built."""
import json
import os
import shlex
import subprocess
import sys

LIBRARY_DIR = "CMakeFiles/ignite_core.dir/"


def fail(what):
    print(f"fuzz_sources: {what}", file=sys.stderr)
    sys.exit(2)


def core_objects(build):
    """{object path: source path} for ignite_core's C sources in build."""
    path = os.path.join(build, "compile_commands.json")
    try:
        with open(path) as f:
            commands = json.load(f)
    except OSError as e:
        fail(f"{path}: {e.strerror}: configure and build ignite first (make)")
    objects = {}
    for c in commands:
        if not c["file"].endswith(".c"):
            continue
        args = shlex.split(c["command"])
        out = args[args.index("-o") + 1]
        if out.startswith(LIBRARY_DIR):
            objects[os.path.join(c["directory"], out)] = c["file"]
    return objects


def symbols(objects):
    """{object: (defined, undefined)}: the global symbols of each object."""
    r = subprocess.run(["nm", "-A", "-P", "-g", *objects], capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["nm failed"])[0]  # "nm: FILE: No such file"
        fail(f"{why}: build ignite first (make)")
    table = {o: (set(), set()) for o in objects}
    for line in r.stdout.splitlines():
        # POSIX format with the file first: "FILE: NAME TYPE [VALUE SIZE]"
        obj, _, rest = line.rpartition(": ")
        name, kind = rest.split()[:2]
        table[obj][1 if kind == "U" else 0].add(name)
    return table


def main():
    if len(sys.argv) != 3:
        fail("usage: fuzz_sources.py BUILD_DIR ENTRY_OBJECT")
    build, entry = sys.argv[1:]
    objects = core_objects(build)
    table = symbols([*objects, entry])
    definer = {}
    for obj in objects:
        for name in table[obj][0]:
            definer.setdefault(name, obj)
    need, todo = set(), list(table[entry][1])
    while todo:
        obj = definer.get(todo.pop())
        if obj and obj not in need:
            need.add(obj)
            todo.extend(table[obj][1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for src in sorted(os.path.relpath(objects[o], root) for o in need):
        print(src)


if __name__ == "__main__":
    main()
