"""ignite batch against ignite run for the Python tests: a batch's output
lines, and one request of it run alone with the same options
(tests/cli/test_batch.py, test_batch_arch.py)."""
import json
import os
import subprocess

from igtest import check

IGNITE = os.environ.get("IGNITE_BIN", "ignite")


def batch(model, lines, *args, env=None, timeout=600):
    """Runs ignite batch with `lines` on stdin; (rc, [objects], stderr)."""
    data = "".join(l + "\n" for l in lines).encode() if isinstance(lines, list) else lines
    r = subprocess.run([IGNITE, "batch", "-m", model, "-t", "2", *args], input=data,
                       capture_output=True, timeout=timeout, env=env)
    objs = []
    for line in r.stdout.decode("utf-8", "replace").splitlines():
        try:
            objs.append(json.loads(line))
        except ValueError:
            check(False, f"batch {args}: an output line is not JSON: {line[:200]!r}")
    return r.returncode, objs, r.stderr.decode("utf-8", "replace")


def run_alone(model, req, env=None, extra=()):
    """The same request through `ignite run --json` (extra: options both got)."""
    args = [IGNITE, "run", "-m", model, "-t", "2", "-q", "--json", *extra, "-p", req["prompt"],
            "-n", str(req.get("n_predict", 256)), "--temp", str(req.get("temperature", 0.8)),
            "-s", str(req.get("seed", 1))]
    if req.get("chat"):
        args.append("--chat")
        if "system" in req:
            args += ["--system", req["system"]]
    stops = req.get("stop", [])
    for s in [stops] if isinstance(stops, str) else stops:
        args += ["--stop", s]
    for k, opt in (("top_k", "--top-k"), ("top_p", "--top-p"), ("min_p", "--min-p"),
                   ("repeat_penalty", "--repeat-penalty"), ("repeat_last_n", "--repeat-last-n")):
        if k in req:
            args += [opt, str(req[k])]
    if req.get("ignore_eos"):
        args.append("--ignore-eos")
    if "json_schema" in req:
        args += ["--json-schema", json.dumps(req["json_schema"])]
    if "grammar" in req:
        args += ["--grammar", req["grammar"]]
    r = subprocess.run(args, capture_output=True, timeout=300, env=env)
    check(r.returncode == 0, f"run alone: rc {r.returncode} {r.stderr[-300:]!r}")
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {}
