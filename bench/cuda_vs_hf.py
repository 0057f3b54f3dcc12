#!/usr/bin/env python3
"""bench/cuda_vs_hf.py: ignite's CUDA backend against Hugging Face transformers
(SDPA attention, bf16) on the same GPU and the same model shapes, with the
two ceilings measured in the same run:

  * the GEMM floor of a prefill: every linear layer's product at that many
    tokens timed alone through torch.matmul (cuBLAS), summed over the layers
    (attention and the element-wise work excluded);
  * the copy bandwidth: a large device-to-device copy (bytes read + written).

ignite runs `ignite bench --device cuda -m synthetic:NAME` (random weights
made on the device); transformers builds LlamaForCausalLM from the same
configuration with random weights on the GPU. Prefill = one forward over n
random tokens returning the last position's logits (TTFT); decode = tokens/s
of greedy generation of N tokens (transformers: model.generate, its dynamic
cache). Prints one table; --json FILE keeps the numbers.

ignite runs once per prefill attention variant asked for: "auto" (the
chooser's pick) and any named with --variants, plus with --best-from TSV the
fastest variant of that table (bench/sdpa_compare.py --tsv) at the model's
head dim and the n nearest the longest prompt (IGNITE_FLASH_VARIANT).

Usage: cuda_vs_hf.py --bin build/ignite [--model Llama-3-8B] [-p 512,2048,8192]
                     [-n 128] [-r 3] [--variants auto,NAME] [--best-from TSV]
Needs torch and transformers with CUDA. Run by scripts/gpu/ttft.sh (the GPU check)."""
import argparse
import json
import os
import subprocess
import sys

SHAPES = {  # name: layers, embd, heads, kv heads, head dim, ff, vocab, rope base, tied
    "Llama-3-8B": (32, 4096, 32, 8, 128, 14336, 128256, 500000.0, False),
    "Llama-3.2-1B": (16, 2048, 32, 8, 64, 8192, 128256, 500000.0, True),
    "SmolLM2-135M": (30, 576, 9, 3, 64, 1536, 49152, 100000.0, True),
}


def timed(torch, fn, reps):
    """Median milliseconds of fn over reps runs after one warm-up, by CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth(torch):
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # 1 GiB, several times L2
    x.random_(0, 255)
    y = torch.empty_like(x)
    ms = timed(torch, lambda: y.copy_(x), 10)
    return 2 * x.numel() / (ms * 1e-3)


def gemm_floor_ms(torch, shape, n):
    layers, e, h, kvh, hd, ff, vocab = shape[:7]
    dims = [(e, h * hd), (e, kvh * hd), (e, kvh * hd), (h * hd, e), (e, ff), (e, ff), (ff, e)]
    total = 0.0
    x_cache = {}
    for k, m in dims:
        if k not in x_cache:
            x_cache[k] = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(k, m, device="cuda", dtype=torch.bfloat16)
        total += timed(torch, lambda: torch.matmul(x_cache[k], w), 5)
    return total * layers


def hf_model(torch, shape):
    from transformers import LlamaConfig, LlamaForCausalLM
    layers, e, h, kvh, hd, ff, vocab, base, tied = shape
    cfg = LlamaConfig(hidden_size=e, intermediate_size=ff, num_hidden_layers=layers,
                      num_attention_heads=h, num_key_value_heads=kvh, head_dim=hd,
                      vocab_size=vocab, max_position_embeddings=16384, rope_theta=base,
                      tie_word_embeddings=tied, attn_implementation="sdpa")
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    return model.eval()


def hf_prefill_ms(torch, model, vocab, n, reps):
    ids = torch.randint(0, vocab, (1, n), device="cuda")

    def run():
        with torch.no_grad():
            try:
                model(ids, use_cache=True, logits_to_keep=1)
            except TypeError:
                model(ids, use_cache=True, num_logits_to_keep=1)
    return timed(torch, run, reps)


def hf_decode_ts(torch, model, vocab, n, reps):
    ids = torch.randint(0, vocab, (1, 1), device="cuda")

    def run():
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=0)
    return n / (timed(torch, run, reps) * 1e-3)


def ignite_rows(args, variant, refusable=False):
    """ignite bench's rows with prefill attention `variant`; None where
    `refusable` and ignite refused the variant for its paged cache."""
    cmd = [args.bin, "bench", "--device", "cuda", "-m", f"synthetic:{args.model}:F16",
           "-p", args.p, "-n", str(args.n), "-r", str(args.r), "-b", str(max(map(int, args.p.split(",")))),
           "-o", "jsonl"]
    env = dict(os.environ)
    if variant != "auto":
        env["IGNITE_FLASH_VARIANT"] = variant
    print(f"+ IGNITE_FLASH_VARIANT={variant}" if variant != "auto" else "+", " ".join(cmd),
          flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        if refusable and "reads no paged cache" in out.stderr:
            return None
        raise SystemExit(f"ignite bench ({variant}) failed with {out.returncode}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def best_variant(path, hd, n):
    """The fastest kernel variant of an attn_speed TSV at head dim hd and the
    measured n nearest n, or None."""
    try:
        with open(path) as f:
            lines = [l.rstrip("\n").split("\t") for l in f if l.strip() and not l.startswith("#")]
    except OSError as e:
        print(f"cuda_vs_hf: no speed table ({e})", file=sys.stderr)
        return None
    rows = []
    for r in lines[1:]:
        try:
            if r[2] not in ("torch", "flash") and int(r[3]) == hd and float(r[5]) == float(r[5]):
                rows.append((r[2], int(r[4]), float(r[5])))
        except (IndexError, ValueError):
            continue
    if not rows:
        return None
    near = min({m for _, m, _ in rows}, key=lambda m: abs(m - n))
    return max((r for r in rows if r[1] == near), key=lambda r: r[2])[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", default="Llama-3-8B", choices=sorted(SHAPES))
    ap.add_argument("-p", default="512,2048,8192")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--variants", default="auto", help="prefill attention variants for ignite")
    ap.add_argument("--best-from", help="also the fastest variant of this attn_speed TSV")
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("cuda_vs_hf: torch sees no CUDA device", file=sys.stderr)
        return 77
    shape = SHAPES[args.model]
    variants = args.variants.split(",")
    runs = {v: ignite_rows(args, v) for v in variants}
    left_out = None
    if args.best_from:
        # the fastest kernel of a single-sequence sweep may not read ignite's paged
        # cache (ws128n160 does not): ignite refuses it, and the run goes on without it
        best = best_variant(args.best_from, shape[4], max(map(int, args.p.split(","))))
        if best and best not in variants:
            rows = ignite_rows(args, best, refusable=True)
            if rows is None:
                left_out = best
                print(f"cuda_vs_hf: {best} reads no paged cache; left out", file=sys.stderr)
            else:
                runs[best] = rows
                variants.append(best)
    dev = torch.cuda.get_device_name(0)
    bw = copy_bandwidth(torch)
    import transformers
    print(f"device: {dev}; torch {torch.__version__}, transformers {transformers.__version__}; "
          f"copy bandwidth {bw / 1e12:.2f} TB/s")
    model = hf_model(torch, shape)
    n_params = sum(p.numel() for p in model.parameters())
    result = {"device": dev, "copy_bw": bw, "model": args.model, "n_params": n_params,
              "variants": variants, "left_out": left_out, "tests": []}
    head = " ".join(f"{'ignite ' + v:>18}" for v in variants)
    print(f"{'test':>8} {head} {'transformers':>13} {'speedup':>9} "
          f"{'GEMM floor':>11} {'ignite/floor':>12}")
    for i, r in enumerate(runs[variants[0]]):
        rs = [runs[v][i] for v in variants]
        if r["n_prompt"]:
            n = int(r["n_prompt"])
            ours = [x["avg_ns"] / 1e6 for x in rs]
            hf = hf_prefill_ms(torch, model, shape[6], n, args.r)
            floor = gemm_floor_ms(torch, shape, n)
            best = min(ours)
            cols = " ".join(f"{o:15.1f} ms" for o in ours)
            print(f"{'pp' + str(n):>8} {cols} {hf:10.1f} ms {hf / best:9.2f} "
                  f"{floor:8.1f} ms {best / floor:12.2f}", flush=True)
            t = {"test": f"pp{n}", "ignite_ms": ours[0], "hf_ms": hf, "gemm_floor_ms": floor}
            for v, o in zip(variants, ours):
                t[f"ignite_ms_{v}"] = o
            result["tests"].append(t)
        else:
            n = int(r["n_gen"])
            ours = rs[0]["avg_ts"]
            hf = hf_decode_ts(torch, model, shape[6], n, max(1, args.r - 1))
            # ignite streams every weight once per token (f16: 2 bytes each)
            frac = ours * 2 * n_params / bw
            print(f"{'tg' + str(n):>8} {ours:8.1f} t/s {hf:9.1f} t/s {ours / hf:9.2f} "
                  f"{'':>11} {'weights at ' + format(frac * 100, '.0f') + '% of copy bw':>12}",
                  flush=True)
            result["tests"].append({"test": f"tg{n}", "ignite_ts": ours, "hf_ts": hf,
                                    "weight_bw_fraction": frac})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
