#!/usr/bin/env python3
"""scripts/gpu/attn_paged_table.py: the paged prefill attention against the
unpaged one (issue 44: "the paged variant within 5 % of the unpaged one"), from
`bench_flash_attn --paged` lines (bench/bench_flash_attn.c):

  flash_attn variant=V n_head=H n_head_kv=K hd=D n=N ms=T tflops=F [pos0=P] [paged=1]

Each paged=1 line is paired with the unpaged line of the same variant, heads,
head dim, n, pos0 and schedule before it. One comment line per pair on stdout
(the attn-speed step appends them to attn_speed.tsv, whose reader skips `#`):

  # paged V hd=D n=N pos0=P: paged/unpaged time R (T_paged / T ms) (target <= 1.05: met)

then `# paged: W of M pairs within 5 %`. Exit 1 when no pair was found or a
paged line has no unpaged partner, else 0 (a missed target is a figure, not a
failure). Tested by tests/unit/test_gpu_check.sh on made-up lines.

  attn_paged_table.py FILE..."""
import re
import sys

LINE = re.compile(r"^flash_attn variant=(\S+) n_head=(\d+) n_head_kv=(\d+) hd=(\d+) n=(\d+) "
                  r"ms=([\d.]+) tflops=[\d.]+(.*)$")
TARGET = 1.05


def main(paths):
    unpaged, pairs, orphans = {}, [], []
    for path in paths:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as e:
            print(f"# paged: {path}: {e.strerror}")
            return 1
        for line in lines:
            m = LINE.match(line.strip())
            if not m:
                continue
            variant, heads, heads_kv, hd, n, ms, tail = m.groups()
            words = tail.split()
            pos0 = next((w[5:] for w in words if w.startswith("pos0=")), "0")
            key = (variant, heads, heads_kv, hd, n, pos0, "schedule=static" in words)
            if "paged=1" in words:
                if key in unpaged:
                    pairs.append((key, unpaged[key], float(ms)))
                else:
                    orphans.append(key)
            else:
                unpaged[key] = float(ms)
    met = 0
    for (variant, _, _, hd, n, pos0, static), base, ms in pairs:
        r = ms / base if base > 0 else float("inf")
        met += r <= TARGET
        print(f"# paged {variant} hd={hd} n={n} pos0={pos0}{' static' if static else ''}: "
              f"paged/unpaged time {r:.3f} ({ms:.4f} / {base:.4f} ms) "
              f"(target <= {TARGET}: {'met' if r <= TARGET else 'not met'})")
    for variant, _, _, hd, n, pos0, _ in orphans:
        print(f"# paged {variant} hd={hd} n={n} pos0={pos0}: no unpaged line to compare")
    print(f"# paged: {met} of {len(pairs)} pairs within 5 %")
    return 0 if pairs and not orphans else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
