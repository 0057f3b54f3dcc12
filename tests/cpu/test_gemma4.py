"""tests/cpu/test_gemma4.py: Gemma 4 (gemma4) on the CPU against the fp64
numpy reference tests/cpu/ref_gemma4.py (weights dequantized by the gguf
package), on bench/random_gguf.py's gemma4 `tiny` shape written here in F16,
Q8_0 and Q4_K_M: 9 layers (global every third, window 16), per-layer KV
heads, head dims 64 local / 128 global, RoPE over 64 local dims and the
global layers' proportional RoPE (rope_freqs), FFN widths per layer, V = K
on two global layers, the last 3 layers reading earlier layers' K/V, per-layer
embeddings, layer output scales, logits soft-capped.

  - exact path (IGNITE_MATMUL=exact): a 40-token prompt whole and in chunks
    of 7 (the 16-position window crossed inside the prompt and between
    chunks), then 20 fixed decode tokens (crossing it again) and 4 greedy
    ones: logits within 1e-4 relative of the reference at every step,
    greedy tokens equal; chunked = whole bit for bit;
  - the KV memory: `ignite info --json` bytes per token equal to the own-KV
    layers' 2 x KV heads x head dim x element (the shared layers add none),
    and the no-sharing figure beside it equal to every layer's;
  - a saved cache (`run --prompt-only --save-kv`, `--load-kv`) continues
    as the uninterrupted run (greedy text equal), and holds each KV once:
    its size grows by the own-KV layers' f32 bytes (and an id) a token;
  - the int8 path (the default) on Q8_0: the same top token as the
    reference at every step (int8 activations: not within 1e-4);
  - `ignite info`'s weights read a token (Q4_K_M): the gguf package's
    tensor bytes, of the per-layer embedding table a row;
  - the Gemma 4 chat template (llama.cpp's models/ggml-vocab-gemma-4.gguf in
    the sdist, when fetched: scripts/fetch-model.sh llama-src) rendered by
    ignite as jinja2 renders it, a system turn and a conversation;
  - the mixture of experts (`moe-tiny`: 8 experts of 128, 2 used, beside a
    dense MLP; the router's own scaled norm, GELU experts, per-expert output
    scales) in F16 and Q4_K_M, on the exact path as above, and in Q4_K_M with
    the experts' gate and up fused (ffn_gate_up_exps, as llama.cpp's converter
    writes a real 26B-A4B) on both paths; IGNITE_MOE_TRACE's lines (F16): the
    reference's experts and router logits;
  - the window rule (the local layers' blocks given back as the window
    passes): 194 positions against the reference and = keeping every block,
    the window side's counts; `batch --kv-mem` holding a request only with
    the rule = run; a cache saved past the window continues; `info`'s bytes.
Under the sanitizers: the dense F16 file and the fused MoE file only.
Usage: test_gemma4.py FORWARD_DUMP   (IGNITE_BIN: the ignite binary)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
import ggufgen  # noqa: E402
from bench_gguf import random_gguf  # noqa: E402
import randgguf_gemma4  # noqa: E402
from ref_gemma4 import Gemma4Ref  # noqa: E402
from igtest import sanitized  # noqa: E402

BOUND = 1e-4
IGNITE = os.environ.get("IGNITE_BIN") or os.path.join(HERE, "..", "..", "build", "ignite")
failures = []


def fail(msg):
    print("FAIL " + msg)
    failures.append(msg)


def dump(tool, path, prompt, fixed, n_greedy, out, exact=True, chunk=None, window=None):
    env = dict(os.environ, IGNITE_MATMUL="exact" if exact else "int8")
    cmd = [tool, "-m", path, "-o", out, "-g", str(n_greedy), "-d", ",".join(map(str, fixed))]
    cmd += (["-c", str(chunk)] if chunk else []) + (["-w"] if window is not None else [])
    cmd += [",".join(map(str, prompt))]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"forward_dump failed with status {res.returncode}: {' '.join(cmd)}")
    greedy = [int(t) for line in res.stdout.splitlines() if line.startswith("greedy:")
              for t in line.split()[1:]]
    if window is not None:  # the pool's window counts (forward_dump -w)
        w = next(l for l in res.stdout.splitlines() if l.startswith("window:")).split()[1:]
        window.update({w[i]: int(w[i + 1]) for i in range(0, len(w), 2)})
    return np.fromfile(out, dtype=np.float32), greedy


def against_reference(ref, tool, path, name, prompt, fixed, tmp):
    runs = {}
    for chunk in (None, 7):
        flat, greedy = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "l.bin"),
                            chunk=chunk)
        runs[chunk] = (flat, greedy)
    if not (np.array_equal(runs[None][0], runs[7][0]) and runs[None][1] == runs[7][1]):
        fail(f"{name}: chunks of 7 differ from the whole prompt")
    flat, greedy = runs[7]
    ours = flat.reshape(-1, ref.n_vocab).astype(np.float64)
    cache = ref.new_cache()
    worst = 0.0
    steps = [prompt] + [[t] for t in fixed + greedy]
    for i, toks in enumerate(steps):
        r = ref.forward(toks, cache)
        err = np.abs(ours[i] - r).max() / np.abs(r).max()
        worst = max(worst, err)
        if err > BOUND:
            fail(f"{name}, step {i}: relative error {err:.3e} > {BOUND:.0e}")
            return
        if i > len(fixed):  # a greedy step's token: the argmax of the step before
            mine, theirs = greedy[i - 1 - len(fixed)], int(np.argmax(prev))
            if mine != theirs and (prev[theirs] - prev[mine]) / np.abs(prev).max() > BOUND:
                fail(f"{name}, greedy step {i - 1 - len(fixed)}: ours {mine}, reference {theirs}")
                return
        prev = r
    print(f"ok     {name}: {len(steps)} steps (prompt in chunks of 7 = whole), worst relative "
          f"error {worst:.2e}")


def window_rule(ref, tool, path, name, tmp, rng):
    """The window rule (forward_dump -w): the local layers' blocks (and
    the shared layers reading them) in the pool's window side, given back
    as the window passes. A 150-token prompt in chunks of 7 and 40 decode
    steps: every step within 1e-4 of the reference, bit for bit the run
    keeping every block, and the window side's counts: at most its cap of
    2 blocks (15 positions back and 7 rows) of the sequence's 4, blocks
    given back."""
    prompt = [int(t) for t in rng.integers(3, ref.n_vocab, 150)]
    fixed = [int(t) for t in rng.integers(3, ref.n_vocab, 40)]
    counts = {}
    flat, greedy = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "w.bin"), chunk=7,
                        window=counts)
    every, greedy_every = dump(tool, path, prompt, fixed, 4, os.path.join(tmp, "e.bin"),
                               chunk=7)
    if not (np.array_equal(flat, every) and greedy == greedy_every):
        fail(f"{name}: the window rule changes the logits")
    n_pos = 150 + 40 + 4
    gone = (n_pos - 1 - (ref.window - 1)) // 64  # blocks behind the last row's window
    if counts.get("cap") != 2 or counts["peak"] > 2 or counts["freed"] != gone or \
            counts["used"] != -(-n_pos // 64) - gone:
        fail(f"{name}: window counts {counts}; expected cap 2, {gone} blocks given back")
    ours = flat.reshape(-1, ref.n_vocab).astype(np.float64)
    cache = ref.new_cache()
    worst = 0.0
    for i, toks in enumerate([prompt] + [[t] for t in fixed + greedy]):
        r = ref.forward(toks, cache)
        worst = max(worst, np.abs(ours[i] - r).max() / np.abs(r).max())
    if worst > BOUND:
        fail(f"{name}, window rule: relative error {worst:.3e} > {BOUND:.0e}")
    else:
        print(f"ok     {name}, window rule: {len(fixed) + 5} steps over 194 positions, worst "
              f"relative error {worst:.2e}, = keeping every block; window side {counts}")


def int8_top(ref, tool, path, name, prompt, fixed, tmp):
    flat, _ = dump(tool, path, prompt, fixed, 0, os.path.join(tmp, "q.bin"), exact=False)
    ours = flat.reshape(-1, ref.n_vocab)
    cache = ref.new_cache()
    for i, toks in enumerate([prompt] + [[t] for t in fixed]):
        r = ref.forward(toks, cache)
        if int(np.argmax(ours[i])) != int(np.argmax(r)):
            fail(f"{name}, int8 path, step {i}: top {int(np.argmax(ours[i]))} vs "
                 f"{int(np.argmax(r))}")
            return
    print(f"ok     {name}, int8 path: the reference's top token at all {len(fixed) + 1} steps")


def moe_trace(ref, tool, path, name, prompt, tmp):
    """IGNITE_MOE_TRACE (bench/kl_vs_fp64.py reads it): a line per layer and
    row of the prompt's step (the last layer: the last row, the one wanted)
    naming the reference's k experts, the router's logits within 1e-4 of
    its."""
    ref.routes = []
    ref.forward(prompt, ref.new_cache())
    want, ref.routes = ref.routes, None
    env = dict(os.environ, IGNITE_MATMUL="exact", IGNITE_MOE_TRACE="1")
    res = subprocess.run([tool, "-m", path, "-o", os.path.join(tmp, "t.bin"),
                          ",".join(map(str, prompt))], capture_output=True, text=True, env=env,
                         timeout=300)
    got = {}
    for line in res.stderr.splitlines():
        if line.startswith("moe: layer "):
            w = line.split()
            i = w.index("logits")
            got.setdefault(int(w[2]), []).append((int(w[4]), {int(e) for e in w[6:i]},
                                                  [float(v) for v in w[i + 1:]]))
    k = ref.n_expert_used
    for layer, (_, lg) in enumerate(want):
        rows = got.get(layer, [])
        lg = lg[-1:] if layer == ref.n_layer - 1 else lg
        if [r[0] for r in rows] != list(range(len(lg))):
            fail(f"{name}, IGNITE_MOE_TRACE: layer {layer} rows {[r[0] for r in rows]}, "
                 f"expected 0 .. {len(lg) - 1} (exit {res.returncode})")
            return
        for (row, experts, logits), r in zip(rows, lg):
            top = set(int(e) for e in np.argsort(-r, kind="stable")[:k])
            if experts != top or np.abs(np.array(logits) - r).max() > BOUND * np.abs(r).max():
                fail(f"{name}, IGNITE_MOE_TRACE: layer {layer} row {row}: experts {experts} "
                     f"logits {logits}, the reference's {top} {r}")
                return
    print(f"ok     {name}, IGNITE_MOE_TRACE: the reference's experts and router logits at "
          f"{sum(len(v) for v in got.values())} rows of {len(got)} layers")


def kv_memory(path, ref):
    res = subprocess.run([IGNITE, "info", "-m", path, "--json"], capture_output=True, text=True)
    info = json.loads(res.stdout)
    own = sum(2 * ref.n_head_kv[i] * ref.head_dim[i] for i in range(ref.n_layer)
              if ref.src[i] == i)
    every = sum(2 * ref.n_head_kv[i] * ref.head_dim[i] for i in range(ref.n_layer))
    got = info.get("kv_bytes_per_token", {})
    unshared = info.get("kv_bytes_per_token_unshared", {})
    if got.get("f32") != 4 * own or got.get("f16") != 2 * own:
        fail(f"KV bytes a token {got}, expected {4 * own} f32 ({own} elements of the own-KV "
             "layers)")
    elif unshared.get("f32") != 4 * every or unshared.get("f16") != 2 * every:
        fail(f"no-sharing KV bytes a token {unshared}, expected {4 * every} f32")
    else:
        print(f"ok     KV memory: {4 * own} bytes a token f32 (no sharing: {4 * every})")
    # the window rule: the full layers' bytes a token, the local layers' a
    # window's blocks (15 positions back and a step of 512 rows, one block
    # more) a sequence
    full = sum(2 * ref.n_head_kv[i] * ref.head_dim[i] for i in range(ref.n_layer)
               if ref.src[i] == i and not ref.sliding[i])
    cap = min(-(-(ref.window - 1 + 512) // 64) + 1, -(-info["n_ctx_train"] // 64))
    want = {"bytes_per_token": {"f32": 4 * full, "f16": 2 * full},
            "window_bytes_per_sequence": {"f32": 4 * cap * 64 * (own - full),
                                          "f16": 2 * cap * 64 * (own - full)},
            "window_blocks": cap, "rows_per_step": 512}
    if info.get("kv_window_rule") != want:
        fail(f"KV memory under the window rule: {info.get('kv_window_rule')}, expected {want}")
    else:
        print(f"ok     KV memory under the window rule: {4 * full} bytes a token f32 and "
              f"{4 * cap * 64 * (own - full)} a sequence for the local layers")
    return own


def weights_read(path):
    """`ignite info`'s weights read a token (what a decode step streams)
    against the gguf package's tensor sizes: every tensor whole (rope_freqs,
    read at load, aside), of the two looked-up tables a row each, and
    token_embd whole where no output.weight makes it the head too."""
    from gguf import GGUFReader
    ts = {t.name: t for t in GGUFReader(path).tensors if t.name != "rope_freqs.weight"}
    tied = "output.weight" not in ts
    want = 0
    for name, t in ts.items():
        looked_up = name == "per_layer_token_embd.weight" or (name == "token_embd.weight"
                                                              and not tied)
        want += int(t.n_bytes) // int(t.shape[-1]) if looked_up else int(t.n_bytes)
    out = subprocess.run([IGNITE, "info", "-m", path], capture_output=True, text=True).stdout
    line = next((l for l in out.splitlines() if l.startswith("weights read")), "")
    if line.split()[2:3] != [str(want)]:
        fail(f"weights read a token: '{line}', expected {want} bytes")
    else:
        print(f"ok     weights read a token: {want} bytes (tied: {tied})")


def vocab_file(tmp, n_vocab):
    """A GGUF holding only a toy gpt2 vocabulary of n_vocab tokens (letters,
    space, fillers), for random_gguf.py's --vocab-from."""
    toks = ["<unk>", "<s>", "</s>", "\u0120"] + [chr(ord("a") + i) for i in range(26)]
    toks += [f"<f{i}>" for i in range(n_vocab - len(toks))]
    g = ggufgen.Gguf()
    g.add("tokenizer.ggml.model", ggufgen.STR, "gpt2")
    g.add("tokenizer.ggml.pre", ggufgen.STR, "gpt2")
    g.add("tokenizer.ggml.tokens", ggufgen.ARR, toks, ggufgen.STR)
    g.add("tokenizer.ggml.token_type", ggufgen.ARR, [3, 3, 3] + [1] * (len(toks) - 3),
          ggufgen.I32)
    g.add("tokenizer.ggml.merges", ggufgen.ARR, ["x y"], ggufgen.STR)
    g.add("tokenizer.ggml.bos_token_id", ggufgen.U32, 1)
    g.add("tokenizer.ggml.eos_token_id", ggufgen.U32, 2)
    path = os.path.join(tmp, "vocab.gguf")
    with open(path, "wb") as f:
        f.write(g.build())
    return path


def run_json(model, *args):
    r = subprocess.run([IGNITE, "run", "-m", model, "-t", "2", "--json", "--temp", "0",
                        "--ignore-eos", *args], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail(f"ignite run {args}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        return {}
    return json.loads(r.stdout)


def saved_cache(tmp, own):
    path = os.path.join(tmp, "vocab-f16.gguf")
    random_gguf.write(path, "tiny", "F16", seed=5, arch="gemma4",
                      vocab_from=vocab_file(tmp, 1024))
    prompt = "the quick brown fox jumps over the lazy dog again and again"
    full = run_json(path, "-p", prompt, "-n", "12")
    sizes = []
    for cut, name in ((prompt[:20], "a.kv"), (prompt, "b.kv")):
        kvf = os.path.join(tmp, name)
        saved = run_json(path, "-p", cut, "--prompt-only", "--save-kv", kvf)
        sizes.append((saved.get("tokens", {}).get("prompt", 0), os.path.getsize(kvf)))
    rest = run_json(path, "--load-kv", os.path.join(tmp, "b.kv"), "-n", "12")
    if not full or rest.get("text") != full.get("text"):
        fail(f"saved cache: continued {rest.get('text')!r}, uninterrupted {full.get('text')!r}")
        return
    (n1, s1), (n2, s2) = sizes
    per_token = (s2 - s1) / (n2 - n1)
    # a token's K and V of the own-KV layers (the CPU's f32 cache), its id
    if abs(per_token - (4 * own + 4)) > 0.5:
        fail(f"saved cache: {per_token:.1f} bytes a token, expected {4 * own + 4} (f32 K/V of "
             "the own-KV layers once, and the id)")
        return
    print(f"ok     saved cache: --load-kv continues as the uninterrupted run; {per_token:.0f} "
          "bytes a token (each KV once)")


def window_cli(tmp):
    """The window rule through the CLI on saved_cache's model (window 16,
    kv groups from `info`): a ~400-position request (-b 16) through `batch
    --kv-mem 2`, which holds its blocks only with the rule (the window side's
    2 blocks beside the full layers' blocks: the premise is checked from
    info's bytes), gives run's text; a cache saved after a prompt that
    crossed the window (its local rows given back: saved as zeros) continues
    as the uninterrupted run."""
    path = os.path.join(tmp, "vocab-f16.gguf")
    info = json.loads(subprocess.run([IGNITE, "info", "-m", path, "--json"],
                                     capture_output=True, text=True).stdout)
    per_block = {g["kind"]: g["bytes_per_block"]["f32"] for g in info["kv_groups"]}
    prompt = "the quick brown fox jumps over the lazy dog again and again " * 5  # 300 tokens
    opts = ("-c", "1024", "-b", "16", "-n", "100")
    full = run_json(path, "-p", prompt, *opts)
    n_prompt = full.get("tokens", {}).get("prompt", 0)
    blocks = -(-(n_prompt + 100) // 64)
    mem = 2 << 20
    if blocks * (per_block["full"] + per_block["sliding_window"]) <= mem or \
            blocks * per_block["full"] + 2 * per_block["sliding_window"] > mem:
        fail(f"window rule: {blocks} blocks of {per_block}: the premise (fits in 2 MiB only "
             "with the rule) does not hold")
        return
    line = json.dumps({"prompt": prompt, "n_predict": 100}) + "\n"
    r = subprocess.run([IGNITE, "batch", "-m", path, "-t", "2", "-P", "1", "--kv-mem", "2",
                        "--temp", "0", "--ignore-eos", *opts[:4]], input=line,
                       capture_output=True, text=True, timeout=120)
    got = json.loads(r.stdout.splitlines()[0]) if r.returncode == 0 and r.stdout else {}
    if got.get("text") != full.get("text"):
        fail(f"window rule: batch --kv-mem 2 (exit {r.returncode}) gave {got!r:.200}, run "
             f"{full.get('text')!r:.200} ({r.stderr.strip()[-300:]})")
        return
    kvf = os.path.join(tmp, "long.kv")
    run_json(path, "-p", prompt, "--prompt-only", "--save-kv", kvf, *opts[:4])
    rest = run_json(path, "--load-kv", kvf, *opts)
    if rest.get("text") != full.get("text"):
        fail(f"window rule: continued {rest.get('text')!r:.200}, uninterrupted "
             f"{full.get('text')!r:.200}")
        return
    print(f"ok     window rule through the CLI: {n_prompt} + 100 positions in batch --kv-mem 2 "
          f"({blocks} blocks: {blocks * sum(per_block.values()) / 1048576:.2f} MiB without the "
          "rule) = run; a saved cache past the window continues as the uninterrupted run")


def chat_template(tmp):
    import jinja2
    from gguf import GGUFReader
    vocab = os.path.join(os.environ.get("IGNITE_CACHE") or os.path.expanduser("~/.cache/ignite"),
                         "llama-src", "llama_cpp_python-0.3.36", "vendor", "llama.cpp", "models",
                         "ggml-vocab-gemma-4.gguf")
    if not os.path.exists(vocab):
        print("skip   the Gemma 4 chat template: no llama-src (scripts/fetch-model.sh llama-src)")
        return
    f = GGUFReader(vocab).fields["tokenizer.chat_template"]
    text = bytes(f.parts[f.data[0]]).decode()
    tfile = os.path.join(tmp, "gemma4.jinja")
    with open(tfile, "w") as out:
        out.write(text)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols"])
    for system in (None, "Be brief."):
        msgs = ([{"role": "system", "content": system}] if system else []) + \
            [{"role": "user", "content": "abc def"}]
        want = env.from_string(text).render(messages=msgs, add_generation_prompt=True,
                                            bos_token="<s>")
        args = ["--system", system] if system else []
        r = subprocess.run([IGNITE, "run", "-m", os.path.join(tmp, "vocab-f16.gguf"),
                            "--chat-template-file", tfile, "-p", "abc def", "-n", "1",
                            "--verbose-prompt", *args], capture_output=True, text=True,
                           timeout=120)
        got = [ln[len("prompt: "):] for ln in r.stderr.splitlines() if ln.startswith("prompt: ")]
        # the toy vocabulary adds no BOS token itself: its text stays in the render
        if r.returncode != 0 or got != [want.replace("\n", "\\n")]:
            fail(f"Gemma 4 chat template: ignite {got!r} (exit {r.returncode}), jinja2 {want!r}")
            return
    print("ok     the Gemma 4 chat template: ignite's render = jinja2's")


def main():
    tool = sys.argv[1]
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory() as tmp:
        # (the sanitizers, ~30x slower: the F16 file, whose cases reach every path the
        # quantized ones do, and the fused experts)
        for qtype in ("F16",) if sanitized() else ("F16", "Q8_0", "Q4_K_M"):
            path = os.path.join(tmp, f"tiny-{qtype}.gguf")
            random_gguf.write(path, "tiny", qtype, seed=3, arch="gemma4")
            ref = Gemma4Ref(path)
            prompt = [int(t) for t in rng.integers(3, ref.n_vocab, 40)]
            fixed = [int(t) for t in rng.integers(3, ref.n_vocab, 20)]
            against_reference(ref, tool, path, f"gemma4 tiny {qtype}", prompt, fixed, tmp)
            if qtype == "Q8_0":
                int8_top(ref, tool, path, f"gemma4 tiny {qtype}", prompt, fixed, tmp)
            if qtype == "Q4_K_M":
                weights_read(path)
            if qtype == "F16":
                window_rule(ref, tool, path, f"gemma4 tiny {qtype}", tmp, rng)
                own = kv_memory(path, ref)
                saved_cache(tmp, own)
                window_cli(tmp)
                chat_template(tmp)
        # the experts' gate and up apart, and fused as llama.cpp's converter writes them
        moe = (("F16", False), ("Q4_K_M", False), ("Q4_K_M", True))
        for qtype, fused in moe[2:] if sanitized() else moe:
            path = os.path.join(tmp, f"moe-{qtype}-{fused}.gguf")
            random_gguf.write(path, "moe-tiny", qtype, seed=4, arch="gemma4",
                              fused_experts=fused)
            ref = Gemma4Ref(path)
            prompt = [int(t) for t in rng.integers(3, ref.n_vocab, 40)]
            fixed = [int(t) for t in rng.integers(3, ref.n_vocab, 20)]
            name = f"gemma4 moe-tiny {qtype}" + (" (ffn_gate_up_exps)" if fused else "")
            against_reference(ref, tool, path, name, prompt, fixed, tmp)
            if qtype == "F16":
                moe_trace(ref, tool, path, name, prompt, tmp)
            if fused:
                int8_top(ref, tool, path, name, prompt, fixed, tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
