/* prefill/attn_fused.h: the int8 path's attention is the exact path's
 * source compiled a second time (prefill/attn_tiled_fused.c,
 * prefill/attn_decode_fused.c) with floating-point contraction on, so that
 * every a += q * k and o * corr + p * v of the score and accumulation loops
 * becomes one FMA where the CPU has it, and with ops_exp_row_fused's
 * polynomial for the softmax: about 1.2x the exact path's speed at long
 * context on AVX2 (docs/benchmarks.md). Same loops, same order of
 * operations, so a row's result still depends only on its position and the
 * keys it sees (a decode row gives its bits inside a prompt chunk); within
 * flash attention's error bound of fp64 (tests/cpu/test_attn_tiled.c), no
 * longer the exact path's bits. Included first by both files; with
 * ATTN_FUSED defined, their public names take a _fused suffix. */
#ifndef IGNITE_PREFILL_ATTN_FUSED_H
#define IGNITE_PREFILL_ATTN_FUSED_H

#ifdef ATTN_FUSED
#define attn_tiled_scratch_floats attn_tiled_scratch_floats_fused
#define attn_tiled_run attn_tiled_run_fused
#define attn_decode_f16_fast attn_decode_f16_fast_fused
#define attn_decode_scores_f16 attn_decode_scores_f16_fused
#define attn_decode_accumulate_f16 attn_decode_accumulate_f16_fused
#endif

#endif
