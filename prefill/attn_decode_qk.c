/* prefill/attn_decode_qk.c: a decode item's scores read a q8_0 or q4_0 K
 * tile in place, each key block's int8 dot products against the int8 query
 * in registers, four keys by three rows at a time with one set of shuffles
 * summing eight of them (attn_decode.c's f16 score loops, for the int8
 * path's quantized K). The int8 matmul's tile kernel, which scored these
 * keys before, is built for weights: per call of 4 keys x 3 rows it gathers
 * the rows' scales, broadcasts a scale product per pair and reduces each
 * pair's lanes alone, and at depth those calls were a third of a quantized
 * cache's decode attention.
 *
 * Every score keeps the tile kernel's floating-point operations
 * (ops/qmatmul_x86.h, tile32): per block eight int32 lane sums (exact, in
 * whatever instructions), converted, and added to the lanes by one FMA
 * with dk dx (one rounded product); the lanes summed as its hsum, which is
 * v8_sum's order; q4_0's -8 dk sx summed by FMAs apart and added last. So a
 * decode row gives the bits the tile gives the same row inside a prompt
 * chunk. Not for the scalar set, whose tile sums in another order.
 * Prompt chunks' items score a quantized K here too (their attention
 * 1.1-1.15x less CPU than through the tile kernel: docs/benchmarks.md,
 * issue 51).
 * Covered by tests/cpu/test_attn_qk.c (against the tile kernel, bit for bit,
 * every set the CPU runs) and tests/cpu/test_attn_tiled.c (a decode row
 * alone against the same row in one item, also under IGNITE_SIMD=avx2). */
#include "prefill/attn_decode_qk.h"

#include "core/half.h"
#include "models/quant.h"
#include "prefill/attn_v8.h"

#include <stdbool.h>
#include <stddef.h>

/* xc's blocks per row on the stack: head dims up to 512. */
#define QK_MAX_BLOCKS 16

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* prefetcht0 as a statement GCC keeps (attn_decode.c). */
#define prefetch_line(p) __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)(p)))

/* Rows in blocks of three, the last four or two as two blocks of two, a
 * lone row alone. */
static int64_t block_rows(int64_t left)
{
    return left == 1 ? 1 : left == 4 || left == 2 ? 2 : 3;
}

#define QK_TARGET __attribute__((target("avx2,fma,f16c")))
#define QK_NAME(name) name##_avx2
#include "prefill/attn_decode_qk_x86.h"
#undef QK_TARGET
#undef QK_NAME

/* AVX512-VNNI with VL: vpdpbusd on ymm, 32 registers; four keys as two zmm
 * of two keys each (keys4z: a prompt item's q8_0 attention at 4096 tokens
 * 1.1x less CPU, docs/benchmarks.md). */
#define QK_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define QK_NAME(name) name##_vnni
#define QK_DPBUSD _mm256_dpbusd_epi32
#define QK_ZMM 1 /* four keys as two zmm: keys4z */
#include "prefill/attn_decode_qk_x86.h"
#undef QK_TARGET
#undef QK_NAME
#undef QK_DPBUSD
#undef QK_ZMM

#if defined(__has_include)
#if __has_include(<avxvnniintrin.h>)
#define QK_AVXVNNI_BUILT 1
#define QK_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define QK_NAME(name) name##_avxvnni
#define QK_DPBUSD _mm256_dpbusd_avx_epi32
#include "prefill/attn_decode_qk_x86.h"
#undef QK_TARGET
#undef QK_NAME
#undef QK_DPBUSD
#endif
#endif

attn_qk_fn attn_decode_qk(enum kv_dtype dtype, enum qmm_isa isa, int64_t hd)
{
    if ((dtype != KV_Q8_0 && dtype != KV_Q4_0) || hd % QMM_QK != 0 ||
        hd / QMM_QK > QK_MAX_BLOCKS)
        return NULL;
    bool q8 = dtype == KV_Q8_0;
    switch (isa) {
    case QMM_AVX2: return q8 ? scores_q8_0_avx2 : scores_q4_0_avx2;
    case QMM_VNNI: return q8 ? scores_q8_0_vnni : scores_q4_0_vnni;
#ifdef QK_AVXVNNI_BUILT
    case QMM_AVXVNNI: return q8 ? scores_q8_0_avxvnni : scores_q4_0_avxvnni;
#endif
    default: return NULL;
    }
}

#else

attn_qk_fn attn_decode_qk(enum kv_dtype dtype, enum qmm_isa isa, int64_t hd)
{
    (void)dtype, (void)isa, (void)hd;
    return NULL;
}

#endif
