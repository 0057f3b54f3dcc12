/* prefill/attn_fused.h: the int8 path's attention is the exact path's
 * source compiled a second time (prefill/attn_tiled_fused.c,
 * prefill/attn_decode_fused.c) with floating-point contraction on, so that
 * every a += q * k and o * corr + p * v of the score and accumulation loops
 * becomes one FMA (fma(p, v, o * corr): the product o * corr is rounded)
 * where the code is built for FMA (the x86-64-v3 clones, the AVX-512 forms,
 * attn_decode.c's kernels), and with ops_exp_row_fused's polynomial for the
 * softmax: a long AVX2 prefill 1.1-1.3x faster than the int8 path was with
 * the exact attention (docs/benchmarks.md). Same loops, same order of
 * operations, so a row's result still depends only on its position and the
 * keys it sees (a decode row gives its bits inside a prompt chunk); within
 * flash attention's error bound of fp64 (tests/cpu/test_attn_tiled.c), no
 * longer the exact path's bits. Included first by both files; with
 * ATTN_FUSED defined, their public names take a _fused suffix. */
#ifndef IGNITE_PREFILL_ATTN_FUSED_H
#define IGNITE_PREFILL_ATTN_FUSED_H

#include "ops/simd.h"

/* Whether the forms built for FMA (the AVX-512 blocks of attn_tiled.c and
 * attn_decode.c's kernels, which contraction fuses) may run: in the fused
 * build only where the cloned loops run their x86-64-v3 clone (the clone
 * the loader picks), which fuses the same multiply-adds; elsewhere every
 * row takes the baseline loops, unfused, so a decode row still gives its
 * prompt-chunk bits. The exact build fuses nothing anywhere. */
#if !defined(ATTN_FUSED)
#define attn_fma_forms_ok() 1
#elif OPS_SIMD_CLONES_ON && __GNUC__ >= 12
#define attn_fma_forms_ok() __builtin_cpu_supports("x86-64-v3")
#else
#define attn_fma_forms_ok() 0
#endif

#ifdef ATTN_FUSED
#define attn_tiled_scratch_floats attn_tiled_scratch_floats_fused
#define attn_tiled_run attn_tiled_run_fused
#define attn_decode_f16_fast attn_decode_f16_fast_fused
#define attn_decode_scores_f16 attn_decode_scores_f16_fused
#define attn_decode_accumulate_f16 attn_decode_accumulate_f16_fused
#define attn_decode_accumulate_quant attn_decode_accumulate_quant_fused
#endif

#endif
