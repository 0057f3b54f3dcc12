#!/usr/bin/env python3
"""bench/hf_batch_generate.py: Hugging Face transformers' batched `generate` on
the GPU, the baseline of the GPU check's batch step (scripts/gpu/batch.sh):
LlamaForCausalLM built from a model's configuration with random weights (f16
or bf16, made on the device), batches of B prompts of random token ids, each
generating exactly N new tokens (greedy, min_new_tokens = max_new_tokens = N,
so no request stops early), timed from the call to its last token (prefill
included, as `ignite bench --requests` counts output_throughput).

One JSON object per batch size on stdout (and --jsonl FILE):
  {"engine": "transformers", "batch": 64, "requests": 64, "input_len": 512,
   "output_len": 128, "seconds": ..., "output_tok_s": ..., "dtype": "f16", ...}
With --requests R, R requests run in ceil(R / B) calls of B (the last may be
smaller); without, one call of B. A batch that runs out of GPU memory gives a
row with "error" and the others still run.

  hf_batch_generate.py [--model Llama-3-8B] [--batches 64,256] [--input-len 512]
                       [--output-len 128] [--requests R] [--dtype f16|bf16]
                       [--seed 0] [--jsonl FILE] [--dry-run]
--dry-run prints the plan (the configuration, the calls) without importing torch.
Exit 0, 77 without torch and transformers or when torch sees no CUDA device, 1 when a batch failed, 2 on bad
arguments. torch and transformers are imported only to run (the GPU machine's
Python has them; tests/unit/test_gpu_check.sh runs --dry-run and the pure parts)."""
import argparse
import json
import sys
import time

SHAPES = {  # name: layers, embd, heads, kv heads, head dim, ff, vocab, rope base, tied
    "Llama-3-8B": (32, 4096, 32, 8, 128, 14336, 128256, 500000.0, False),
    "Llama-3.2-1B": (16, 2048, 32, 8, 64, 8192, 128256, 500000.0, True),
    "SmolLM2-135M": (30, 576, 9, 3, 64, 1536, 49152, 100000.0, True),
}


def config_kwargs(name, max_pos):
    """LlamaConfig's arguments for model `name`'s shapes (models/synthetic.c's)."""
    layers, e, h, kvh, hd, ff, vocab, base, tied = SHAPES[name]
    return {"hidden_size": e, "intermediate_size": ff, "num_hidden_layers": layers,
            "num_attention_heads": h, "num_key_value_heads": kvh, "head_dim": hd,
            "vocab_size": vocab, "max_position_embeddings": max_pos, "rope_theta": base,
            "tie_word_embeddings": tied}


def positive_list(text):
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r}")
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"want numbers >= 1: {text!r}")
    return vals


def positive(text):
    v = positive_list(text)
    if len(v) != 1:
        raise argparse.ArgumentTypeError(f"want one number: {text!r}")
    return v[0]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Llama-3-8B", choices=sorted(SHAPES))
    ap.add_argument("--batches", type=positive_list, default=[64, 256])
    ap.add_argument("--input-len", type=positive, default=512)
    ap.add_argument("--output-len", type=positive, default=128)
    ap.add_argument("--requests", type=positive, help="requests per batch size (default: B)")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jsonl", help="also write the rows here")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, import nothing")
    return ap.parse_args(argv)


def calls(batch, requests):
    """Sizes of the generate calls that run `requests` requests B at a time."""
    full, rest = divmod(requests, batch)
    return [batch] * full + ([rest] if rest else [])


def plan(args):
    return {"model": args.model, "dtype": args.dtype,
            "config": config_kwargs(args.model, args.input_len + args.output_len),
            "input_len": args.input_len, "output_len": args.output_len,
            "batches": [{"batch": b, "calls": calls(b, args.requests or b)}
                        for b in args.batches]}


def row(batch, sizes, input_len, output_len, seconds, extra):
    """The report of one batch size: output tokens over the calls' seconds."""
    n_out = sum(sizes) * output_len
    r = {"engine": "transformers", "batch": batch, "requests": sum(sizes),
         "input_len": input_len, "output_len": output_len, "seconds": seconds,
         "output_tokens": n_out, "output_tok_s": n_out / seconds if seconds > 0 else None}
    r.update(extra)
    return r


def build_model(torch, args):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**config_kwargs(args.model, args.input_len + args.output_len),
                      attn_implementation="sdpa")
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    torch.set_default_dtype(dtype)
    with torch.device("cuda"):  # random weights made on the device
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    return model.eval()


def generate(torch, model, ids, n_new):
    """Seconds of one batched generate of exactly n_new tokens per row."""
    mask = torch.ones_like(ids)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=n_new,
                             min_new_tokens=n_new, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if out.shape != (ids.shape[0], ids.shape[1] + n_new):
        raise RuntimeError(f"generate returned {tuple(out.shape)}, want "
                           f"({ids.shape[0]}, {ids.shape[1] + n_new})")
    return seconds


def emit(r, out):
    line = json.dumps(r)
    print(line, flush=True)
    if out:
        out.write(line + "\n")
        out.flush()


def main(argv):
    args = parse_args(argv)
    if args.dry_run:
        print(json.dumps(plan(args), indent=1))
        return 0
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"hf_batch_generate: needs torch and transformers ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("hf_batch_generate: torch sees no CUDA device", file=sys.stderr)
        return 77
    extra = {"dtype": args.dtype, "device": torch.cuda.get_device_name(0),
             "torch": torch.__version__, "transformers": transformers.__version__}
    t0 = time.perf_counter()
    model = build_model(torch, args)
    vocab = SHAPES[args.model][6]
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    # warm-up: kernels loaded, allocator primed, outside the timings
    generate(torch, model, torch.randint(0, vocab, (2, 16), device="cuda", generator=gen), 4)
    print(f"hf_batch_generate: {args.model} {args.dtype} on {extra['device']} (torch "
          f"{extra['torch']}, transformers {extra['transformers']}), ready in "
          f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    out = open(args.jsonl, "w") if args.jsonl else None
    status = 0
    for b in plan(args)["batches"]:
        seconds = 0.0
        try:
            for size in b["calls"]:
                ids = torch.randint(0, vocab, (size, args.input_len), device="cuda",
                                    generator=gen)
                seconds += generate(torch, model, ids, args.output_len)
            emit(row(b["batch"], b["calls"], args.input_len, args.output_len, seconds, extra),
                 out)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            r = row(b["batch"], b["calls"], args.input_len, args.output_len, 0.0, extra)
            r["error"] = str(e).splitlines()[0][:200]
            emit(r, out)
            status = 1
            torch.cuda.empty_cache()
    if out:
        out.close()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
