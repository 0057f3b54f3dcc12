"""What the tensor-parallel tests share: mpirun's command line (as root in
CI: --allow-run-as-root), the skip (77) where mpirun or this build's
MPI is absent, and a scratch folder removed at exit."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile


def mpirun_or_skip():
    """mpirun's path; exits 77 (skipped) with a line saying why where the
    tests cannot run."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("SKIP: mpirun not found (Debian: openmpi-bin; scripts/setup.sh installs it)",
              file=sys.stderr)
        sys.exit(77)
    ignite = os.environ.get("IGNITE_BIN", "ignite")
    r = subprocess.run([ignite, "tokenize", "--tp", "2", "-p", "x"], capture_output=True,
                       text=True)
    if "built without" in r.stderr:
        print("SKIP: this ignite was built without MPI", file=sys.stderr)
        sys.exit(77)
    return mpirun


def scratch():
    """A folder for a test's files (models, dumps: up to a few hundred MB),
    removed when the test exits, passed or not."""
    d = tempfile.mkdtemp(prefix="ignite-tp-")
    atexit.register(shutil.rmtree, d, True)
    return d


SUPP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lsan.supp")


def sanitizer_env():
    """os.environ with Open MPI's own allocations kept until exit left out of
    LeakSanitizer's report (tests/tp/lsan.supp); the ranks inherit it."""
    env = dict(os.environ)
    env["LSAN_OPTIONS"] = ":".join(filter(None, [env.get("LSAN_OPTIONS"),
                                                 f"suppressions={SUPP}"]))
    # the slow unwinder: the fast one stops in Open MPI's plugins, whose frames
    # then match no suppression
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"),
                                                 "fast_unwind_on_malloc=0"]))
    return env


def mpi(mpirun, n, argv, **kw):
    """argv on n ranks: mpirun -np n (oversubscribed: the CI machine has 2
    cores; as root where the tests run as root)."""
    env = kw.pop("env", None) or os.environ
    san = sanitizer_env()
    env = dict(env, LSAN_OPTIONS=san["LSAN_OPTIONS"], ASAN_OPTIONS=san["ASAN_OPTIONS"])
    kw["env"] = env
    cmd = [mpirun, "--oversubscribe", "-np", str(n)]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-run-as-root")
    return subprocess.run(cmd + list(argv), capture_output=True, **kw)
