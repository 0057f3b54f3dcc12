#!/usr/bin/env python3
"""scripts/mutants.py: are the key tests still able to fail? Applies each
mutant of the table below, one at a time, to a scratch copy of this working
tree, builds the targets its tests need, runs each of those tests and
reports "caught" (every one failed), "caught by T" (only T failed), "missed"
(all passed), "stale" (the mutated text is no longer in the file: update the
table) or "broken" (the mutant does not build). The table and what each mutant was last found to do are in
docs/testing-mutants.md.

    scripts/mutants.py                 every mutant
    scripts/mutants.py stop- kv-       the mutants whose id starts so
    scripts/mutants.py --list          the table

Not part of CI (minutes: the first run builds the library in the copy; the
mutants of emulated kernels build a second copy with the emulated tests,
build-emu, longer still). The
copy lives in $IGNITE_MUTANT_DIR (default /tmp/ignite-mutants-$USER), is
refreshed from the working tree (tracked and untracked, not ignored files)
on every run and built incrementally; nothing in the working tree changes.
Exit status: 0 when every mutant did what the table expects, 1 otherwise.
"""
import filecmp
import getpass
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# id, file, old text (must occur exactly once; or a list of such), new text
# (or a list, one per old), build targets, the tests (ctest names), what the
# mutant breaks, expected: "caught" (every one of those tests fails),
# "missed" (none does); a run may also report "caught by T1,T2" (only some).
MUTANTS = [
    ("schema-xmin-inclusive", "grammar/schema.c",
     "lo = xlo + 1, has_lo = true;", "lo = xlo, has_lo = true;",
     ["grammar_tool"], ["test_schema_bounds"],
     "exclusiveMinimum admits the bound itself", "caught"),
    ("schema-xmax-inclusive", "grammar/schema.c",
     "hi = xhi - 1, has_hi = true;", "hi = xhi, has_hi = true;",
     ["grammar_tool"], ["test_schema_bounds"],
     "exclusiveMaximum admits the bound itself", "caught"),
    ("schema-digit-range", "grammar/schema.c",
     "char last = hi_nines ? hi[0] : (char)(hi[0] - 1);", "char last = hi[0];",
     ["grammar_tool"], ["test_schema_bounds"],
     "an integer range's top digit admits every lower digit after it (e.g. 47 admits 49)",
     "caught"),
    ("schema-negative-range", "grammar/schema.c",
     "uint64_t mag_lo = has_hi && hi < 0 ? (uint64_t)-hi : 1;",
     "uint64_t mag_lo = has_hi && hi < 0 ? (uint64_t)-hi + 1 : 1;",
     ["grammar_tool"], ["test_schema_bounds"],
     "a negative maximum excludes itself", "caught"),
    ("schema-maxlength", "grammar/schema.c",
     "ch, (long long)min, (long long)max);", "ch, (long long)min, (long long)max + 1);",
     ["grammar_tool"], ["test_schema_bounds"],
     "maxLength admits one character more", "caught"),
    ("schema-maxitems", "grammar/schema.c",
     "hi = max < 0 ? -1 : max - 1;", "hi = max < 0 ? -1 : max;",
     ["grammar_tool"], ["test_schema_bounds"],
     "maxItems admits one item more", "caught"),
    ("strbuf-printf-cut", "core/strbuf.c",
     "vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);",
     "vsnprintf(b->s + b->len, (size_t)n, fmt, ap);",
     ["test_core"], ["test_core"],
     "the growable string's printf loses its last byte", "caught"),
    ("strbuf-not-sticky", "core/strbuf.c",
     "    if (b->failed)\n        return false;\n    if (b->len + n + 1 <= b->cap)",
     "    if (b->len + n + 1 <= b->cap)",
     ["test_core"], ["test_core"],
     "a failed string takes appends again (the text it lost gone from the middle)", "caught"),
    ("fuzz-sources-direct", "scripts/fuzz_sources.py",
     "            todo.extend(table[obj][1])\n", "",
     ["fuzz_replay", "fuzz_replay_safetensors", "fuzz_replay_hf_json", "fuzz_replay_grammar",
      "fuzz_replay_schema", "fuzz_replay_batch", "fuzz_tok_replay", "fuzz_replay_jinja",
      "fuzz_replay_klfile", "fuzz_replay_kvfile"], ["fuzz_hf_json", "test_fuzz_sources"],
     "fuzz.sh compiles only the sources the entry calls, not what they call", "caught"),
    ("schema-regex-dot", "grammar/schema_regex.c",
     "        cset_add(r, &s, '\\n', '\\n');\n", "",
     ["grammar_tool"], ["test_schema_bounds"],
     "a pattern's '.' admits a newline", "caught"),
    ("schema-number-frac", "grammar/schema.c",
     "bool high = !hi || !all_zero(hi) || !hi_x;", "bool high = true;",
     ["grammar_tool"], ["test_schema_bounds"],
     "an exclusive number maximum admits the bound itself (3.25 under exclusiveMaximum 3.25)",
     "caught"),
    ("jinja-lstrip", "tokenizer/jinja_lex.c",
     "if (b == 0 || L.s[b - 1] == '\\n') /* not after a tag on the same line */",
     "if (false)",
     ["jinja_render_tool"], ["test_jinja"],
     "lstrip_blocks off: the blanks before a block tag stay", "caught"),
    ("chat-next-closing", "tokenizer/chat_conv.c",
     "if (closing && *closing && !strncmp(tail, closing, strlen(closing)))",
     "if (false)",
     ["jinja_render_tool"], ["test_chat_builtin"],
     "the next turn repeats the end-of-turn token already in the cache", "caught"),
    ("stop-exact-fill", "generate/stop.c",
     "if (!sl || sl > m->len)", "if (!sl || sl >= m->len)",
     ["ignite", "test_stop"], ["test_stop", "test_stop_model"],
     "a stop string that exactly fills the held text is missed", "caught"),
    ("stop-held-tail", "generate/stop.c",
     "size_t k = sl - (sl > 0) < m->len ? sl - (sl > 0) : m->len;",
     "size_t k = sl - (sl > 1) - (sl > 0) < m->len ? sl - (sl > 1) - (sl > 0) : m->len;",
     ["ignite", "test_stop"], ["test_stop", "test_stop_model"],
     "the held text is one byte short of the longest prefix", "caught"),
    ("kv-register-partial", "kvcache/kvcache.c",
     "(i + 1) * KV_BLOCK <= s->n_pos && i < s->n_blocks",
     "i * KV_BLOCK < s->n_pos && i < s->n_blocks",
     ["test_engine", "test_kvcache"], ["test_engine", "test_kvcache"],
     "the prefix index is told about a block before it is full", "caught"),
    ("kv-no-generation", "kvcache/kvcache.c",
     ["            index_remove(p, id);\n        p->gen[id]++;\n        p->refs[id] = 1;",
      "         * again with its new tokens. */\n        p->gen[id]++;"],
     ["            index_remove(p, id);\n        p->refs[id] = 1;",
      "         * again with its new tokens. */"],
     ["test_kvcache"], ["test_kvcache"],
     "no generation counter: a block's generation never changes", "caught"),
    ("kv-shrink-gen", "kvcache/kvcache.c",
     "         * again with its new tokens. */\n        p->gen[id]++;",
     "         * again with its new tokens. */",
     ["test_kvcache"], ["test_kvcache"],
     "a block rewritten in place keeps its generation", "caught"),
    ("kv-grow-gen", "kvcache/kvcache.c",
     "            index_remove(p, id);\n        p->gen[id]++;\n        p->refs[id] = 1;",
     "            index_remove(p, id);\n        p->refs[id] = 1;",
     ["test_kvcache", "test_engine"], ["test_kvcache", "test_engine"],
     "a block handed out anew keeps its generation (not observable: blocks go back "
     "children first, so no entry hangs off a block when it is handed out)", "missed"),
    ("sampler-min-p", "decode/sampler.c",
     "if (logits[cand[i]] >= floor_logit)", "if (logits[cand[i]] > floor_logit)",
     ["test_sampler"], ["test_sampler"],
     "min-p drops the token exactly at the threshold", "caught"),
    ("bpe-tie-order", "tokenizer/merge_heap.h",
     "return x.prio != y.prio ? x.prio < y.prio : x.pos < y.pos;",
     "return x.prio != y.prio ? x.prio < y.prio : x.pos > y.pos;",
     ["tok_tool", "test_tok_unit", "ignite"], ["test_tok_unit", "test_hf_smollm"],
     "BPE merges of equal rank go rightmost first", "caught"),
    ("qmm-quant-truncate", "ops/qmatmul_avx2.c",
     "q[i] = _mm256_cvtps_epi32(", "q[i] = _mm256_cvttps_epi32(",
     ["forward_dump", "ignite"], ["test_fast_forward", "test_gemma3_real"],
     "the int8 path's activation quantizer truncates instead of rounding (AVX2 and up)",
     "caught"),
    # The packed copy of float weights (ops/qmatmul.h, QMM_FPR): bit for bit
    # fgemm8's sums, padding rows zero, only the asked rows written.
    ("fpack-gemv-unfused", "ops/qmatmul_zmm.h",
     "acc[k][t] = _mm512_fmadd_ps(wv[k], xb, acc[k][t]);",
     "acc[k][t] = _mm512_add_ps(_mm512_mul_ps(wv[k], xb), acc[k][t]);",
     ["test_qmatmul", "test_matmul"], ["test_qmatmul", "test_matmul"],
     "the packed float GEMV rounds each product (another sum than the GEMM's)", "caught"),
    ("fpack-pad-rows", "ops/qmatmul_pack.c",
     "o[j] = j < rows ? r[j][c] : 0;", "o[j] = r[j][c];",
     ["test_qmatmul"], ["test_qmatmul"],
     "a float copy's padding rows hold row 0 of its last group, not zeros", "caught"),
    ("fpack-partial-rows", "ops/qmatmul_zmm.h",
     "for (int64_t r = lo > r0 ? lo : r0; r < hi && r < r1; r++)\n                    y[t * ldy",
     "for (int64_t r = lo; r < hi && r < r1; r++)\n                    y[t * ldy",
     ["test_qmatmul"], ["test_qmatmul"],
     "a row range starting inside a 16-row group writes the rows before it", "caught"),
    # A decode step's fused launches (docs/gpu.md): emulated tests, built in a
    # second copy with IGNITE_EMU_TESTS=ON (the first build of it is long).
    # (Which split combines is a race the emulator, running blocks one after
    # another, never has: "the first to finish combines" comes out right there.
    # bench_decode_kernels checks the fused combine on a GPU, the GPU check's
    # decode step.)
    ("fuse-combine-all-splits", "decode/decode_attn.cu",
     "(uint16_t)0 : combine_dim<HD>(p, seq, r, h, d, n_used);",
     "(uint16_t)0 : combine_dim<HD>(p, seq, r, h, d, p.n_splits);",
     ["test_decode_attn_emu"], ["test_decode_attn_emu"],
     "the last split merges every split's partial, the unused ones' too", "caught"),
    ("fuse-combine-ticket-kept", "decode/decode_attn.cu",
     "        *counter = 0; /* for the next launch", "        (void)counter; /* for the next launch",
     ["test_decode_attn_emu", "test_backend_fuse_emu"],
     ["test_decode_attn_emu", "test_backend_fuse_emu"],
     "the combine's ticket is not put back to 0 (a replayed graph combines at the wrong split)",
     "caught"),
    # Programmatic dependent launch (docs/gpu.md, IGNITE_PDL=1): the emulator
    # hides what the previous kernel writes until a block's threads meet at
    # griddepcontrol.wait, and faults a block that never waits.
    ("pdl-qgemv-late-wait", "ops/gpu_qgemv.cu",
     ["    ig_grid_dependency_wait();\n    for (int64_t s0 = 0; s0 < w.cols; s0 += slab) {",
      "            stage_x<NMAX>(x, ld_x, n, s0, len, slab, xs, xds);\n        ig_syncthreads();\n"],
     ["    for (int64_t s0 = 0; s0 < w.cols; s0 += slab) {",
      "            stage_x<NMAX>(x, ld_x, n, s0, len, slab, xs, xds);\n        ig_syncthreads();\n"
      "        ig_grid_dependency_wait();\n"],
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the quantized GEMV stages x (or its int8 blocks) before it waits for the kernel that "
     "wrote them", "caught"),
    ("pdl-attn-late-wait", "decode/decode_attn.cu",
     ["    ig_grid_dependency_wait();\n    ig_launch_dependents();\n    const int warp",
      "            q[g][i] *= scale_log2;\n    }\n"],
     ["    ig_launch_dependents();\n    const int warp",
      "            q[g][i] *= scale_log2;\n    }\n    ig_grid_dependency_wait();\n"],
     ["test_decode_attn_emu"], ["test_decode_attn_emu"],
     "the decode attention reads the positions and q before it waits for the Q|K|V product",
     "caught"),
    ("pdl-attn-empty-split-no-wait", "decode/decode_attn.cu",
     ["    ig_grid_dependency_wait();\n    ig_launch_dependents();\n    const int warp",
      "        return; /* nothing to attend to: the combine skips this split */\n"],
     ["    ig_launch_dependents();\n    const int warp",
      "        return; /* nothing to attend to: the combine skips this split */\n"
      "    ig_grid_dependency_wait();\n"],
     ["test_decode_attn_emu"], ["test_decode_attn_emu"],
     "a split with no keys exits without waiting (its grid may complete before the Q|K|V "
     "product; the emulator's fault)", "caught"),
    ("pdl-norm-late-wait", "ops/gpu_elementwise.cu",
     "    gk_dep_start(); /* x: the previous product's */\n    const int64_t t = blockIdx.x;\n"
     "    gk_rmsnorm_row<VEC, false>(x + t * ld_x, w, dim, eps, y + t * dim, (int)blockDim.x);\n",
     "    const int64_t t = blockIdx.x;\n"
     "    gk_rmsnorm_row<VEC, false>(x + t * ld_x, w, dim, eps, y + t * dim, (int)blockDim.x);\n"
     "    gk_dep_start(); /* x: the previous product's */\n",
     ["test_gpu_ops_emu"], ["test_gpu_ops_emu"],
     "RMSNorm reads its row before it waits for the product that wrote it", "caught"),
    ("pdl-greedy-late-wait", "decode/greedy.cu",
     ["    gk_dep_start(); /* x: the output head's logits */\n",
      "            bv = v, bi = (uint32_t)i;\n    }\n"],
     ["",
      "            bv = v, bi = (uint32_t)i;\n    }\n"
      "    gk_dep_start(); /* x: the output head's logits */\n"],
     ["test_gpu_ops_emu"], ["test_gpu_ops_emu"],
     "the greedy kernel reads its row of logits before it waits for the head that wrote it",
     "caught"),
    ("pdl-rope-late-wait", "ops/gpu_elementwise.cu",
     ["    gk_dep_start(); /* qkv: the Q|K|V product's */\n", "    ig_syncthreads();\n    const int64_t blk"],
     ["", "    ig_syncthreads();\n    gk_dep_start();\n    const int64_t blk"],
     ["test_gpu_ops_emu"], ["test_gpu_ops_emu"],
     "RoPE reads the rows' positions (their cos/sin) before it waits", "caught"),
    ("pdl-gemv-f16-late-wait", "ops/gpu_gemv.cu",
     ["    ig_launch_dependents();\n    ig_grid_dependency_wait();\n", "    ig_syncthreads();\n\n    float acc0"],
     ["    ig_launch_dependents();\n", "    ig_syncthreads();\n    ig_grid_dependency_wait();\n\n    float acc0"],
     ["test_gemv_emu"], ["test_gemv_emu"],
     "the f16 GEMV stages x before it waits for the kernel that wrote it", "caught"),
    ("pdl-qembed-no-wait", "ops/gpu_qweights.cu",
     "    gk_dep_start(); /* the tokens may be the greedy kernel's (IG_LAUNCH_DEP) */\n", "",
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the quantized embedding never waits (the emulator's fault; its tokens read hidden)",
     "caught"),
    ("pdl-prefill-late-wait", "prefill/flash_attn.cu",
     ["    ig_grid_dependency_wait();\n    ig_launch_dependents();\n    /* The block's sequence",
      "    /* Keys of the last query of the tile bound the tiles to visit; with a\n"],
     ["    /* The block's sequence",
      "    ig_grid_dependency_wait();\n    ig_launch_dependents();\n"
      "    /* Keys of the last query of the tile bound the tiles to visit; with a\n"],
     ["test_flash_attn_emu"], ["test_flash_attn_emu"],
     "the mma.sync prefill kernel writes the chunk's K/V rows into the cache before it "
     "waits for the kernel that wrote them", "caught"),
    ("pdl-qmma-late-wait", "ops/gpu_qgemm.cu",
     ["        ig_launch_dependents();\n        ig_grid_dependency_wait();\n    };\n",
      "    const int wm = warp % 2, wn = warp / 2; /* the warp's 32 rows and 32 tokens */\n"],
     ["        ig_launch_dependents();\n    };\n",
      "    ig_grid_dependency_wait();\n"
      "    const int wm = warp % 2, wn = warp / 2; /* the warp's 32 rows and 32 tokens */\n"],
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the tensor-core product copies x's tiles before it waits for the kernel that wrote "
     "them (the wait moved after the main loop)", "caught"),
    ("pdl-qdequant-late-wait", "ops/gpu_qweights.cu",
     ["    gk_dep_start();\n    for (bool first = true;",
      "            out[c] = o[c];\n    }\n}\n"],
     ["    for (bool first = true;",
      "            out[c] = o[c];\n    }\n    gk_dep_start();\n}\n"],
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the dequantization into the GEMM's scratch stores its rows before it waits for the "
     "kernel before (which may still read them)", "caught"),
    ("pdl-kvq-late-wait", "ops/gpu_kvq.cu",
     ["    gk_dep_start(); /* k, v: the Q|K|V product's; the positions */\n",
      "        return; /* block-uniform */\n"],
     ["", "        return; /* block-uniform */\n    gk_dep_start();\n"],
     ["test_gpu_ops_emu"], ["test_gpu_ops_emu"],
     "the quantized pool's write reads the row's position and table before it waits (and a "
     "padding row's blocks never wait)", "caught"),
    ("pdl-moe-late-wait", "ops/gpu_moe.cu",
     ["    gk_dep_start(); /* x: the residual the layer's attention wrote */\n",
      "    ss = gk_block_sum(ss);\n"],
     ["", "    ss = gk_block_sum(ss);\n    gk_dep_start();\n"],
     ["test_moe_emu"], ["test_moe_emu"],
     "the MoE routing sums its row's squares before it waits for the kernel that wrote the "
     "row", "caught"),
    ("pdl-dn-late-wait", "ops/gpu_deltanet.cu",
     ["    gk_dep_start(); /* o: the delta rule's; z: the product's */\n",
      "    const float r = 1.0f / sqrtf(gk_add(ss / (float)s.D, eps));\n"],
     ["", "    gk_dep_start();\n    const float r = 1.0f / sqrtf(gk_add(ss / (float)s.D, eps));\n"],
     ["test_deltanet_emu"], ["test_deltanet_emu"],
     "DeltaNet's gated norm reads the delta rule's output before it waits for it", "caught"),
    ("pdl-emu-no-meet", "emu/sched.cc",
     "    if (!emu.pdl || b->griddep_done)\n        return; /* a plain launch",
     "    if (1)\n        return; /* a plain launch",
     ["test_emu_sched", "test_qmm_emu"], ["test_emu_sched", "test_qmm_emu"],
     "the emulator's griddepcontrol.wait returns at once (nothing hidden is ever shown "
     "before the block ends)", "caught"),
    ("fuse-glu-swapped", "ops/gpu_qgemv.cu",
     ": gk_silu_mul(a, b));", ": gk_silu_mul(b, a));",
     ["test_qmm_emu", "test_backend_fuse_emu"], ["test_qmm_emu", "test_backend_fuse_emu"],
     "the quantized gate|up GEMV's SwiGLU takes the up row as the gate", "caught"),
    ("fuse-glu-f16-row", "ops/gpu_gemv.cu",
     "int64_t r1 = pairs ? out + rows / 2 :", "int64_t r1 = pairs ? out + rows / 2 - 1 :",
     ["test_gemv_emu"], ["test_gemv_emu"],
     "the f16 gate|up GEMV pairs gate row i with up row i - 1", "caught"),
    # (As with the combine, "the first block to finish normalizes" comes out
    # right under the emulator; the GPU check's backend tests run the fused
    # step against the CPU backend on a GPU.)
    ("fuse-norm-ticket-kept", "ops/gpu_math.cuh",
     "        *ticket = 0;\n}", "        (void)ticket;\n}",
     ["test_qmm_emu", "test_gemv_emu"], ["test_qmm_emu", "test_gemv_emu"],
     "the norm tail's ticket is not put back to 0 (the next launch never normalizes)",
     "caught"),
    ("fuse-quant-once-truncate", "ops/gpu_math.cuh",
     "const int v = finite ? gk_rint(gk_mul(f[i], id)) : 0;",
     "const int v = finite ? (int)gk_mul(f[i], id) : 0;",
     ["test_qmm_emu", "test_backend_fuse_emu"], ["test_qmm_emu", "test_backend_fuse_emu"],
     "the norm tail's int8 blocks of x truncate instead of rounding (the GEMVs load them)",
     "caught"),
    ("fuse-rope-pair", "ops/gpu_rope.cuh",
     "    *rb = *ra + sl.gap;", "    *rb = *ra + 1;",
     ["test_qmm_emu", "test_gemv_emu"], ["test_qmm_emu", "test_gemv_emu"],
     "the Q|K|V GEMV's warp takes adjacent rows as a half-split RoPE pair", "caught"),
    ("fuse-rope-position", "ops/gpu_rope.cuh",
     "    const int64_t pos = p.pos[t];\n    const int half", "    const int64_t pos = p.pos[0];\n    const int half",
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the Q|K|V GEMV's RoPE turns every row at the first row's position", "caught"),
    ("gguf-need", "models/gguf.c",
     "if (r->size - r->pos >= n)", "if (r->size - r->pos + 1 >= n)",
     ["ignite"], ["test_gguf_malformed"],
     "the GGUF reader's bounds check lets one byte past the end through", "caught"),
    ("qmm-kq-repack", "ops/gpu_qweights.cu",
     "return GK_KQ_OFF(k / 32, (k % 32) / 16) + k % 16;", "return k;",
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the device repack keeps a K type's quants in the file's order (not GK_KQ_OFF's)",
     "caught"),
    ("qmm-kq-gemv-half", "ops/gpu_qgemv.cu",
     "k.q1 = ld16(w.q + sb * T::kQ + GK_KQ_OFF(p, 1));",
     "k.q1 = ld16(w.q + sb * T::kQ + GK_KQ_OFF(p, 0) + 16);",
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the quantized GEMV reads a K chunk's second half where the file's order had it",
     "caught"),
    ("qmm-ring-overwrite", "ops/gpu_qgemv.cu",
     "                load_stage<TYPE, U>(w, ra, rb, c0 + 32 * U, cs1, na, nb);",
     "                load_stage<TYPE, U>(w, ra, rb, c0 + 32 * U, cs1, ka, kb);",
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the GEMV's load ring loads the next stage over the one about to be reduced", "caught"),
    ("qmm-ring-no-advance", "ops/gpu_qgemv.cu",
     "                    ka[u] = na[u], kb[u] = nb[u];", "                    (void)na[u], (void)nb[u];",
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the GEMV's load ring never moves to its next stage (a lane reduces its first chunks "
     "again)", "caught"),
    ("qmm-glu-ticket-kept", "ops/gpu_qgemv.cu",
     "        tickets[group] = 0;", "        (void)tickets;",
     ["test_qmm_emu"], ["test_qmm_emu"],
     "the gate|up GEMV's tail for h's int8 blocks keeps its group's ticket", "caught"),
    ("moe-shexp-gate", "backend/cpu_moe.c",
     "float gate = 1.0f / (1.0f + expf(-dot));", "float gate = 1.0f + 0.0f * dot;",
     ["forward_dump", "ignite"], ["test_qwen35moe"],
     "qwen35moe's shared expert is added without its sigmoid gate", "caught"),
    # ws192n128 (three consumers of 128-key tiles, FA3's 32 / 160 register
    # split): the mask as per-row ranges and the producer's lean loop
    # (item count in shared memory, last tile recomputed) that let it fit.
    ("ws-mask-row-past", "prefill/flash_attn_ws.cu",
     "const int hi = (diag + row + 1 < n_keys ? diag + row + 1 : n_keys) - 2 * t;",
     "const int hi = (diag + row + 2 < n_keys ? diag + row + 2 : n_keys) - 2 * t;",
     ["test_flash_attn_emu"], ["test_flash_attn_emu_ws192n128"],
     "the ws kernel's causal mask lets each row see the key after its own", "caught"),
    ("ws-last-tile-early", "prefill/flash_attn_ws.cu",
     "if (t >= ws_item_at<V, VL>(a, item, ws_seq<V, VL>(a, item)).t_hi)",
     "if (t + 1 >= ws_item_at<V, VL>(a, item, ws_seq<V, VL>(a, item)).t_hi)",
     ["test_flash_attn_emu"], ["test_flash_attn_emu_ws192n128"],
     "the ws producer stops an item's K/V loads one tile early", "caught"),
    ("ws-q-count-stuck", "prefill/flash_attn_ws.cu",
     "ig_sts(sm.q_count(), ig_lds(sm.q_count()) + 1)",
     "ig_sts(sm.q_count(), ig_lds(sm.q_count()))",
     ["test_flash_attn_emu"], ["test_flash_attn_emu_ws192n128"],
     "the ws producer's item count (in shared memory) never moves: the second item waits "
     "on Q's buffer with the first one's parity", "caught"),
    ("dn-avx2-second-vector", "backend/cpu_deltanet_lanes.h",
     "DN_VEC bv = DN_V(B + k * ldb + i + v * DN_LANES);", "DN_VEC bv = DN_V(B + k * ldb + i);",
     ["forward_dump", "ignite"], ["test_deltanet"],
     "the DeltaNet's 8-float sets (AVX2, baseline) read the first vector's columns for a "
     "16-column block's second", "caught"),
    ("dn-avx2-lanes", "backend/cpu_deltanet.c",
     "#define DN_NAME(name) name##_avx2\n#define DN_LANES 8",
     "#define DN_NAME(name) name##_avx2\n#define DN_LANES 16",
     ["forward_dump", "ignite"], ["test_deltanet"],
     "the DeltaNet's AVX2 set steps 16 floats over 8-float vectors", "caught"),
    ("pd-copy-no-host-wait", "backend/gpu_cache.c",
     "int st = IG_DEV(dev_event_sync)(g->dev, g->layer_copied[l & 1]);", "int st = IG_OK;",
     ["test_backend_pd_emu"], ["test_backend_pd_emu"],
     "a layer's hook unpacks its staging before the host waits for the copy stream's event",
     "caught"),
    ("pd-copy-no-mixer-wait", "backend/gpu_cache.c",
     "        (st = IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_COPY, g->layer_mixed[k])) ||\n",
     "", ["test_backend_pd_emu"], ["test_backend_pd_emu"],
     "the copy stream downloads a layer's rows without waiting for the mixer that writes them",
     "caught"),
    ("pd-copy-no-step-wait", "backend/gpu_cache.c",
     "        st = IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_MAIN, g->layer_copied[last & 1]);",
     "        st = IG_OK;", ["test_backend_pd_emu"], ["test_backend_pd_emu"],
     "the main stream's next step is not ordered after the copies (implied by the hooks' host "
     "waits)", "missed"),
    # Issue 49: a step with on_layer (--pd's prefill rank) takes one process's route.
    ("pd-route-prefill", "backend/gpu.c",
     "    const int64_t q_len = step_q_len(g, batch);",
     "    const int64_t q_len = batch->on_layer ? 0 : step_q_len(g, batch);",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin", "test_backend_pd_emu"],
     ["test_backend_pd_emu", "test_cli_emu"],
     "a step with on_layer takes the prefill path where one process takes the decode kernels "
     "(a short prompt's logits and cache not one process's bits: a seeded text differs)",
     "caught"),
    ("pd-route-no-hook", "backend/gpu_forward.c",
     "(st = IG_DEV(gpu_layer_out)(p->g, l)) ||",
     "(p->bucket < 0 && (st = IG_DEV(gpu_layer_out)(p->g, l))) ||",
     ["test_backend_pd_emu"], ["test_backend_pd_emu"],
     "a decode or verify step with on_layer never calls the hook", "caught"),
    ("emu-copy-stream-early", "device/device_emu.cc",
     "    op.unordered = main_work(d) > L->seen;\n    return push_late(L, op);",
     "    (void)L, (void)op;\n    return copy(dst, src, bytes);", ["test_device_emu"],
     ["test_device_emu"], "the emulated copy stream runs its downloads at once (a missing wait would not show)",
     "caught"),
    # batch --pd's NCCL transfers on the transfer stream (backend/gpu_kv_p2p.c):
    # tests/emu/pd_nccl_emu.c through the stand-in, the emulator running that
    # stream late (device_emu.cc's dev_stream_call).
    ("emu-p2p-call-early", "device/device_emu.cc",
     "    int st = push_late(L, op);\n    if (st != IG_OK)\n        (void)fn(user, NULL, "
     "DEV_CALL_DROP);\n    return st;",
     "    (void)op;\n    return fn(user, NULL, DEV_CALL_RUN);", ["test_device_emu"],
     ["test_device_emu"],
     "the emulated transfer stream runs a call at once (a missing wait would not show)",
     "caught"),
    ("p2p-send-no-main-wait", "backend/gpu_kv_p2p.c",
     "    if (st == IG_OK)\n        st = IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_P2P, "
     "g->p2p_main);",
     "    if (st == IG_OK && !grp->send)\n        st = IG_DEV(dev_stream_wait)(g->dev, "
     "DEV_STREAM_P2P, g->p2p_main);",
     ["pd_nccl_emu", "ignite_nccl_standin"], ["test_pd_nccl_emu"],
     "a layer's sends do not wait for the main stream's mixer that wrote the blocks",
     "caught"),
    ("pd-nccl-2x2", "cli/pd.c",
     "                     : pd->o.n_prefill > 1 && pd->o.n_decode > 1\n",
     "                     : false\n",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "--pd 2:2 takes NCCL, whose transfer streams' orders may cross (a hang on GPUs)",
     "caught"),
    ("p2p-recv-no-main-wait", "backend/gpu_kv_p2p.c",
     "    if (st == IG_OK)\n        st = IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_P2P, "
     "g->p2p_main);",
     "    if (st == IG_OK && grp->send)\n        st = IG_DEV(dev_stream_wait)(g->dev, "
     "DEV_STREAM_P2P, g->p2p_main);",
     ["pd_nccl_emu", "ignite_nccl_standin"], ["test_pd_nccl_emu"],
     "a layer's receives do not wait for the main stream's earlier reads of their blocks",
     "caught"),
    ("p2p-no-step-fence", "backend/gpu.c",
     "    if (st == IG_OK)\n        st = IG_DEV(gpu_kv_p2p_fence)(g);\n", "",
     ["pd_nccl_emu", "ignite_nccl_standin"], ["test_pd_nccl_emu"],
     "a step writes the pool before the sends queued before it read their blocks",
     "caught"),
    ("p2p-admit-no-wait", "backend/gpu_kv_p2p.c",
     "    return g->p2p_done ? IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_MAIN, g->p2p_done) : "
     "IG_OK;", "    return IG_OK;",
     ["pd_nccl_emu", "ignite_nccl_standin"], ["test_pd_nccl_emu"],
     "a decode rank's steps read the received blocks before the receives ran", "caught"),
    # --pd's NCCL watchdog (backend/gpu_reduce_nccl.c): test_pd_cli's stopped decode rank on
    # the NCCL path (the stand-in's IGNITE_NCCL_STANDIN_STOP) hits its 40 s limit.
    ("p2p-watch-no-limit", "backend/gpu_reduce_nccl.c",
     "        if (bad != NCCL_SUCCESS || waited > p->limit_s)",
     "        if (bad != NCCL_SUCCESS)",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "the NCCL watchdog polls only the async error: a wait on a stopped peer blocks forever",
     "caught"),
    ("p2p-group-end-unwatched", "backend/gpu_reduce_nccl.c",
     '    bool began = gpu_p2p_wait_begin(p, "ncclGroupEnd");',
     "    bool began = false;",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "ncclGroupEnd (where the stand-in waits for the peer) is not watched", "caught"),
    # (the emulator's transfers block only inside ncclGroupEnd: a GPU's step behind them
    # blocks in its copies and sync, which no emulated run reaches)
    ("p2p-step-unwatched", "backend/gpu.c",
     "    bool watched = IG_DEV(gpu_kv_p2p_watch)(g);",
     "    bool watched = false;",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "a step behind the transfers is not watched", "missed"),
    # The CLI over the emulated CUDA backend (ignite_emu, tests/tp/test_cli_emu.py):
    # --pd's decode rank imports each cache; --tp 2 sums over the NCCL stand-in.
    ("cli-emu-import-short", "backend/gpu_cache.c",
     "                    for (int64_t r = 0; r < rows; r++) {\n"
     "                        kv_row_to_f32(kv_i ? L.dtype_v : L.dtype,",
     "                    for (int64_t r = 0; r + 1 < rows; r++) {\n"
     "                        kv_row_to_f32(kv_i ? L.dtype_v : L.dtype,",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_cli_emu"],
     "an imported f16 cache (the --pd decode rank's) loses its last position's K and V",
     "caught"),
    ("cli-emu-nccl-half", "backend/gpu_reduce_nccl.c",
     "int rc = r->lib.all_reduce(buf, buf, (size_t)n, NCCL_FLOAT32,",
     "int rc = r->lib.all_reduce(buf, buf, (size_t)n / 2, NCCL_FLOAT32,",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_cli_emu"],
     "a --tp rank's NCCL all-reduce sums half the floats", "caught"),
    # --pd's NCCL path over every kind of layer (tests/tp/test_pd_cli.py's nccl case:
    # states_and_windows, the tiny qwen35 and gpt-oss's window of 32 on ignite_emu).
    ("pd-nccl-state-decode-slot", "cli/pd_decode.c",
     ".slot = j->slot, .n_pos = n};", ".slot = 0, .n_pos = n};",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "a decode rank receives every DeltaNet state into slot 0, not the slot held for the "
     "request", "caught"),
    ("pd-nccl-state-prefill-slot", "cli/pd_prefill.c",
     ".slot = rows->slot, .n_pos = j->h.n_tokens};", ".slot = 0, .n_pos = j->h.n_tokens};",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "a prefill rank sends slot 0's DeltaNet states for every request", "caught"),
    ("pd-nccl-state-early", "cli/pd_prefill.c",
     "(state ? final && !j->state_sent", "(state ? !j->state_sent",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "a recurrent layer's state sent after every chunk, before the prompt's last is in it",
     "caught"),
    ("pd-nccl-window-table", "cli/pd_decode.c",
     ".wtable = j->blocks.wtable,", ".wtable = j->blocks.table,",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "a decode rank receives a window layer's blocks at the full table's ids, not into its "
     "window blocks", "caught"),
    ("pd-nccl-many-prefill", "cli/pd.c",
     "if (ok && pd->o.n_prefill > 1 &&", "if (ok && pd->o.n_prefill > 8 &&",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "IGNITE_PD_XFER=nccl taken by a window model at --pd 2:1 (two prefill ranks may promise "
     "one decode slot twice)", "caught"),
    ("pd-engine-held-slot", "generate/engine.c",
     "held ? free_slot(e, held) : NULL;", "held ? free_slot(e, NULL) : NULL;",
     ["ignite", "ignite_cli_emu", "ignite_nccl_standin"], ["test_pd_cli"],
     "the engine admits a reserved history into any free slot, not the one held with its "
     "blocks (where its states were received)", "caught"),
    ("smem-gemv-static-optin", "ops/gpu_gemv.cu",
     "    if (smem + kStaticSmem > 48 * 1024)\n", "    if (smem > 48 * 1024)\n",
     ["test_gemv_emu"], ["test_gemv_emu"],
     "the f16 GEMV at 12288 columns launched without raising the 48 KiB limit that x's 48 KiB "
     "and the norm tail's static shared memory pass (a GPU refuses the launch)", "caught"),
    ("emu-smem-default-unchecked", "emu/smem.cc",
     "        b->smem_total + bytes > EMU_DEFAULT_SMEM) {",
     "        b->smem_total + bytes > EMU_MAX_SMEM) {", ["test_emu_sched"], ["test_emu_sched"],
     "the emulator lets static and dynamic shared memory pass 48 KiB together without the "
     "launch's raise", "caught"),
    ("emu-pageable-async", "device/device_emu.cc",
     "    if (!in_host_block(dst, bytes))\n", "    if (false && !in_host_block(dst, bytes))\n",
     ["test_device_emu"], ["test_device_emu"],
     "the emulated dev_download_async takes pageable memory (a GPU would copy synchronously)",
     "caught"),
    ("smem-moe-route-optin", "ops/gpu_moe.cu",
     "    if (smem + 1024 > 48 * 1024)\n        IG_SMEM_OPTIN(&route_kernel, smem);\n", "",
     ["test_moe_emu"], ["test_moe_emu"],
     "MoE's routing launched at 48 KiB of row and logits less 16 bytes without raising the "
     "limit its block_sum's static bytes pass (a GPU refuses the launch)", "caught"),
    ("moe-tile-offset", "ops/gpu_moe.cu",
     ["    gk_dep_start(); /* the tiles (the sort's) and x (the norm's or gate|up's) */\n"
      "    const int64_t tile = tile0 + blockIdx.y;",
      "    gk_dep_start(); /* the tiles name the expert: nothing to load before */\n"
      "    const int64_t tile = tile0 + blockIdx.y;"],
     ["    gk_dep_start(); /* the tiles (the sort's) and x (the norm's or gate|up's) */\n"
      "    const int64_t tile = blockIdx.y + 0 * tile0;",
      "    gk_dep_start(); /* the tiles name the expert: nothing to load before */\n"
      "    const int64_t tile = blockIdx.y + 0 * tile0;"],
     ["test_moe_emu"], ["test_moe_emu"],
     "the MoE products' later launches of a grid.y cut in launches redo the first tiles",
     "caught"),
]


def is_emu(m):
    """Whether a mutant's tests are emulated ones (tests/emu: names end in _emu)."""
    return any(t.endswith("_emu") for t in m[4])


def sh(args, cwd, log, timeout=3600):
    with open(log, "a") as f:
        f.write(f"$ {' '.join(args)}\n")
        f.flush()
        return subprocess.run(args, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                              timeout=timeout).returncode


def sync_tree(dst):
    """Copies the working tree's files into dst, rewriting only those that
    differ (with a new mtime, so the build sees them)."""
    names = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for n in names:
        src, out = os.path.join(ROOT, n), os.path.join(dst, n)
        if not n or not os.path.isfile(src) or os.path.islink(src):
            continue
        if os.path.exists(out) and filecmp.cmp(src, out, shallow=False):
            continue
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(src, out)
        shutil.copymode(src, out)


def main(argv):
    if "--list" in argv:
        for m in MUTANTS:
            print(f"{m[0]:24} {m[1]:22} {','.join(m[5]):36} {m[7]:7} {m[6]}")
        return 0
    chosen = [m for m in MUTANTS if not argv or any(m[0].startswith(a) for a in argv)]
    base = os.environ.get("IGNITE_MUTANT_DIR") or f"/tmp/ignite-mutants-{getpass.getuser()}"
    src, build, log = os.path.join(base, "src"), os.path.join(base, "build"), \
        os.path.join(base, "log.txt")
    os.makedirs(src, exist_ok=True)
    open(log, "w").close()
    sync_tree(src)
    jobs = os.environ.get("JOBS", "2")
    # Mutants of the emulated kernels build in a copy with the emulated tests.
    builds = {False: build, True: build + "-emu"}
    for emu in sorted({is_emu(m) for m in chosen}):
        if not os.path.exists(os.path.join(builds[emu], "CMakeCache.txt")):
            py = os.path.join(ROOT, ".venv", "bin", "python")
            if sh(["cmake", "-S", src, "-B", builds[emu], "-DIGNITE_CUDA=OFF",
                   f"-DIGNITE_EMU_TESTS={'ON' if emu else 'OFF'}",
                   "-DCMAKE_BUILD_TYPE=Release", f"-DIGNITE_PYTHON={py}"], base, log):
                print(f"configure failed: {log}")
                return 1
    results, ok = [], True
    for m in chosen:
        mid, path, old, new, targets, tests, what, expect = m
        build = builds[is_emu(m)]
        f = os.path.join(src, path)
        with open(f) as fh:
            text = fh.read()
        t0 = time.time()
        olds, news = (old, new) if isinstance(old, list) else ([old], [new])
        if any(text.count(o) != 1 for o in olds):
            verdict = "stale"
        else:
            mutated = text
            for o, n in zip(olds, news):
                mutated = mutated.replace(o, n)
            try:
                with open(f, "w") as fh:
                    fh.write(mutated)
                if sh(["cmake", "--build", build, f"-j{jobs}", "--target", *targets], base, log):
                    verdict = "broken"
                else:
                    failed = [t for t in tests
                              if sh(["ctest", "--output-on-failure", "-R", f"^{t}$"], build, log)]
                    verdict = "caught" if failed == tests else \
                        "missed" if not failed else "caught by " + ",".join(failed)
            finally:
                with open(f, "w") as fh:  # a new mtime: the next build compiles it again
                    fh.write(text)
        ok &= verdict == expect
        results.append((mid, verdict, expect, time.time() - t0))
        print(f"{mid:24} {verdict:7} (expected {expect}) {time.time() - t0:6.1f} s  {what}",
              flush=True)
    # leave the copies built as the tree is
    for emu in sorted({is_emu(m) for m in chosen}):
        sh(["cmake", "--build", builds[emu], f"-j{jobs}", "--target",
            *sorted({t for m in chosen if is_emu(m) == emu for t in m[4]})], base, log)
    bad = [r for r in results if r[1] != r[2]]
    print(f"{len(results)} mutants, {len(bad)} not as expected; log: {log}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
