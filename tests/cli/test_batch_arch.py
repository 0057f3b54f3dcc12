"""tests/cli/test_batch_arch.py: `ignite batch` and `ignite run` on the
architectures after Llama: every request's output from batch equals what
`ignite run` gives the same request alone (text, stop reason, token count),
as tests/cli/test_batch.py checks on the default model.

Synthetic qwen3 (Q/K head norms, Q4_K matrices, Q6_K embeddings) and gemma3
(a 16-position sliding window on its local layers, local RoPE base, post
norms, GeGLU, scaled embeddings, Q5_0 matrices) from tests/pylib/archgen.py:
several requests at once in steps of at most 16 rows (-b 16), so prompt
chunks of one sequence share steps with decode rows of others, prompts and
generations cross the window's edge (and a 64-position cache block), greedy
and seeded sampling, the int8 path and the exact one. A hybrid (the tiny
qwen35) whose prompts share steps gives what each alone gives. Then a small
check on Gemma 3 270M's real weights (skipped without the file: make fetch-model).
"""
import json
import os
import sys
import tempfile

import gguf
from gguf import GGMLQuantizationType as QT

from archgen import write_model
from batchrun import batch, run_alone
from igtest import check, gemma3_path, summary, tiny_qwen35


def vocab():
    """A SentencePiece vocabulary with the 256 byte tokens (any text
    encodes) and a few pieces."""
    pieces = ["\u2581", "\u2581the", "\u2581a", "\u2581fox", "\u2581dog", "\u2581and", "er", "in"]
    toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [3, 3, 3, 2] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * (4 + 256) + [-float(i) for i in range(len(pieces))]
    return toks, scores, types, "llama"


def batch_reqs(model, reqs, args, env):
    return batch(model, [json.dumps(r) for r in reqs], *args, env=env)


def check_same(model, reqs, args, env, what):
    rc, objs, err = batch_reqs(model, reqs, args, env)
    check(rc == 0, f"{what}: batch rc {rc} {err[-400:]!r}")
    check(len(objs) == len(reqs), f"{what}: {len(objs)} results for {len(reqs)} requests")
    by_id = {o.get("id"): o for o in objs}
    for r in reqs:
        got, want = by_id.get(r["id"], {}), run_alone(model, r, env)
        check(got.get("text") == want.get("text"),
              f"{what}, {r['id']}: batch text {got.get('text')!r} != run's {want.get('text')!r}")
        check(got.get("stop") == want.get("stop") and
              got.get("tokens", {}).get("generated") == want.get("tokens", {}).get("generated"),
              f"{what}, {r['id']}: stop/tokens {got.get('stop')} {got.get('tokens')} vs "
              f"{want.get('stop')} {want.get('tokens')}")
    print(f"ok     {what}: {len(reqs)} requests")


def synthetic_requests():
    fox = "the quick brown fox jumps over the lazy dog and "
    reqs = [
        {"prompt": "the fox", "n_predict": 30, "temperature": 0},
        {"prompt": fox * 2, "n_predict": 12, "temperature": 0.9, "seed": 7},
        {"prompt": fox * 4, "n_predict": 20, "temperature": 0},  # ~200 tokens: 4 blocks
        {"prompt": "a dog", "n_predict": 40, "temperature": 0.7, "seed": 3},
    ]
    for i, r in enumerate(reqs):
        r["id"] = f"r{i}"
        r["ignore_eos"] = True  # random weights: lengths independent of EOS
    return reqs


def synthetic_checks(tmp, env):
    toks = vocab()
    n_vocab = len(toks[0])
    q = os.path.join(tmp, "qwen3.gguf")
    write_model(q, "qwen3", n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=256,
                n_vocab=n_vocab, mat=QT.Q4_K, emb=QT.Q6_K, vocab=toks)
    g = os.path.join(tmp, "gemma3.gguf")
    write_model(g, "gemma3", n_layer=3, n_embd=256, n_head=2, n_head_kv=1, n_ff=256,
                n_vocab=n_vocab, mat=QT.Q5_0, emb=QT.Q8_0, vocab=toks,
                keys={"attention.sliding_window": (16, gguf.GGUFValueType.UINT32)})
    reqs = synthetic_requests()
    exact = dict(env, IGNITE_MATMUL="exact")
    # "no_think" belongs to chat lines: one error object, the other line runs
    rc, objs, _ = batch_reqs(q, [{"prompt": "a", "n_predict": 2, "no_think": True},
                            {"prompt": "b", "n_predict": 2}], [], env)
    errs = [o for o in objs if "error" in o]
    check(rc == 9 and len(objs) == 2 and len(errs) == 1 and
          "needs \"chat\"" in errs[0].get("error", ""), f"no_think without chat: {rc} {objs}")
    for name, path in (("qwen3", q), ("gemma3", g)):
        check_same(path, reqs, ["-P", "3", "-b", "16"], env, f"synthetic {name}, int8, -P 3 -b 16")
        check_same(path, reqs, ["-P", "4", "-b", "16"], exact, f"synthetic {name}, exact, -P 4")


def gemma3_checks(env):
    path = gemma3_path()
    if not os.path.exists(path):
        print("Gemma 3 270M absent: its check is skipped", file=sys.stderr)
        return
    reqs = [
        {"id": "a", "prompt": "The capital of France is", "n_predict": 8, "temperature": 0},
        {"id": "b", "prompt": "Once upon a time, in a small village by the sea,",
         "n_predict": 8, "temperature": 0.8, "seed": 5},
        {"id": "c", "prompt": "Three colours: red,", "n_predict": 8, "temperature": 0},
    ]
    check_same(path, reqs, ["-P", "3", "-b", "16"], env, "Gemma 3 270M, -P 3 -b 16")


def hybrid_checks(tmp, env):
    """The tiny qwen35 (3 gated DeltaNet layers, 1 attention layer; llama.cpp's
    qwen35 vocabulary): prompts of 40-215 tokens against -P 1 (each prompt in
    one step): at -P 4 in steps of 96 rows, where prompts share steps and one
    is cut short (the engine cuts a hybrid's prompt where its DeltaNet chunks
    end, multiples of 64 positions; cut at 96 as a dense model's is, request
    1's text differed on this file); at -P 4 -b 40, every prompt cut inside
    its chunks; at -P 6 -b 66, decode rows leaving a prompt less than the way
    to its next chunk. A prompt cut inside a chunk keeps a checkpoint and its
    next step runs the chunk again whole (backend/cpu_deltanet.c), so the
    states and the int8 path's texts are bit for bit the same (without the
    checkpoint, requests 1 and 3 differed at -b 40, request 3 at -b 66).
    IGNITE_DELTANET_TRACE says the cuts inside chunks happened ("again N"
    above 0)."""
    path = tiny_qwen35(tmp)
    if not path:
        return
    words = "the river town mill bridge market farmers grain wool apples week".split()
    reqs = [{"id": i, "prompt": " ".join(words[(j * 7 + i) % 11] for j in range(40 + 35 * i)),
             "n_predict": 12, "temperature": 0} for i in range(6)]
    runs = (["-P", "1"], ["-P", "4", "-b", "96"], ["-P", "4", "-b", "40"], ["-P", "6", "-b", "66"])
    texts = {}
    for args in runs:
        tenv = dict(env, IGNITE_DELTANET_TRACE="1") if "-b" in args else env
        rc, objs, err = batch_reqs(path, reqs, ["--ordered", *args], tenv)
        check(rc == 0 and len(objs) == len(reqs), f"qwen35 batch {args}: rc {rc} {err[-300:]!r}")
        texts[" ".join(args)] = [o.get("text") for o in objs]
        again = [int(ln.split()[12]) for ln in err.splitlines()
                 if ln.startswith("deltanet:") and len(ln.split()) > 12]
        if args[-1] in ("40", "66"):
            check(any(a > 0 for a in again), f"qwen35 batch {args}: no prompt cut inside a chunk")
    one = texts["-P 1"]
    for args in runs[1:]:
        key = " ".join(args)
        for i, (a, b) in enumerate(zip(one, texts[key])):
            check(a == b, f"qwen35 request {i}: {key} {b!r} != -P 1 {a!r}")
    print(f"ok     qwen35 (hybrid), int8: -P 4 -b 96, -P 4 -b 40, -P 6 -b 66 = -P 1, "
          f"{len(reqs)} requests")


def main():
    env = dict(os.environ)
    env.pop("IGNITE_MATMUL", None)
    with tempfile.TemporaryDirectory() as tmp:
        synthetic_checks(tmp, env)
        hybrid_checks(tmp, env)
    gemma3_checks(env)
    return summary("test_batch_arch")


if __name__ == "__main__":
    sys.exit(main())
