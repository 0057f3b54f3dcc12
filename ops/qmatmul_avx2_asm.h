/* ops/qmatmul_avx2_asm.h: the AVX2 prefill GEMM's main loop for QMM_NT
 * tokens in assembly, included by ops/qmatmul_x86.h in the AVX2 build only.
 *
 * Why assembly: the loop needs 8 quant vectors (a block's 8 rows x 32
 * quants, held across the tokens), 4 f32 accumulators and 4 temporaries,
 * exactly the 16 ymm registers, and GCC's allocation of the intrinsics
 * spilled the accumulators to the stack on every block. Pinned here, the
 * 4-bit GEMM went from 134 to 153 G multiply-adds/s a core (bench/qmm_cpu,
 * Zen 5); what is left is bound by the multiply pipes (vpmaddubsw,
 * vpmaddwd, vmulps, vfmadd share them).
 *
 * The same operations as gemm8_tokens and gemv8_k6_tokens in C, so every
 * result is theirs bit for bit: the integer sums are exact whatever their
 * order (4-bit pair sums in int16, two chains at a time; Q5_0's too, less
 * their zero point in int16; other 5-bit ones to int32 every 4 vectors;
 * Q6_K's per 16-element half, two vectors at a time)
 * and each f32 update is acc = fma(f, d xd, acc), once per block and token
 * in block order. Register use: ymm0-7 the block's quants, ymm8-11 token
 * t's accumulator, ymm12-15 temporaries. tests/cpu/test_qmatmul.c holds
 * the GEMM to the GEMV and the register tile bit for bit. */
#ifndef IGNITE_OPS_QMATMUL_AVX2_ASM_H
#define IGNITE_OPS_QMATMUL_AVX2_ASM_H

/* Q4_0's zero point in the integer sum: minus 8 times the token block's
 * sum(qs), from its field at 48 + A (sum8). */
#define QMM_ASM_ZERO_POINT_Q4_0(A)                                                           \
    "vpbroadcastd 48" A ", %%ymm13\n\t"                                                      \
    "vpsubd %%ymm13, %%ymm12, %%ymm12\n\t"

/* Q5_0's in the int16 sums: the token block's sum16_pairs at 56 + A, one
 * int16 a lane, off the wrapped 5-bit sums (each lane's true sum of (q -
 * 16) x fits: gemm8_tokens's minus_pairs16). */
#define QMM_ASM_ZERO_POINT_Q5_0(A)                                                           \
    "vpbroadcastd 56" A ", %%ymm13\n\t"                                                      \
    "vpsubw %%ymm13, %%ymm12, %%ymm12\n\t"

/* One token's step of a block: A is the token block's address (its d at
 * A, its quants at 8 + A), ACC the number of its accumulator, ZP16 and
 * ZP the zero point's step in the int16 or the int32 sums, or "". 4-bit
 * quants: 8 pair sums of <= 2 * 15 * 128 fit in int16; Q5_0's wrap there
 * and fit once ZP16 has taken their zero point off. */
#define QMM_ASM_NARROW(A, ACC, ZP16, ZP)                                                     \
    "vpbroadcastd 8" A ", %%ymm13\n\t"                                                        \
    "vpmaddubsw %%ymm13, %%ymm0, %%ymm12\n\t"                                                 \
    "vpbroadcastd 12" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm1, %%ymm15\n\t"                                                 \
    "vpbroadcastd 16" A ", %%ymm13\n\t"                                                       \
    "vpmaddubsw %%ymm13, %%ymm2, %%ymm13\n\t"                                                 \
    "vpaddw %%ymm13, %%ymm12, %%ymm12\n\t"                                                    \
    "vpbroadcastd 20" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm3, %%ymm14\n\t"                                                 \
    "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                                    \
    "vpbroadcastd 24" A ", %%ymm13\n\t"                                                       \
    "vpmaddubsw %%ymm13, %%ymm4, %%ymm13\n\t"                                                 \
    "vpaddw %%ymm13, %%ymm12, %%ymm12\n\t"                                                    \
    "vpbroadcastd 28" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm5, %%ymm14\n\t"                                                 \
    "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                                    \
    "vpbroadcastd 32" A ", %%ymm13\n\t"                                                       \
    "vpmaddubsw %%ymm13, %%ymm6, %%ymm13\n\t"                                                 \
    "vpaddw %%ymm13, %%ymm12, %%ymm12\n\t"                                                    \
    "vpbroadcastd 36" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm7, %%ymm14\n\t"                                                 \
    "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                                    \
    "vpaddw %%ymm15, %%ymm12, %%ymm12\n\t"                                                    \
    ZP16                                                                                    \
    "vpmaddwd %[ones], %%ymm12, %%ymm12\n\t"                                                  \
    ZP                                                                                      \
    "vcvtdq2ps %%ymm12, %%ymm12\n\t"                                                          \
    "vbroadcastss " A ", %%ymm13\n\t"                                                         \
    "vmulps 256(%[p]), %%ymm13, %%ymm13\n\t"                                                  \
    "vfmadd231ps %%ymm13, %%ymm12, %%ymm" ACC "\n\t"

/* 5-bit quants without a zero point (pair sums <= 2 * 31 * 128): to int32
 * every 4 vectors. */
#define QMM_ASM_WIDE(A, ACC)                                                                 \
    "vpbroadcastd 8" A ", %%ymm13\n\t"                                                        \
    "vpmaddubsw %%ymm13, %%ymm0, %%ymm12\n\t"                                                 \
    "vpbroadcastd 12" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm1, %%ymm14\n\t"                                                 \
    "vpaddw %%ymm14, %%ymm12, %%ymm12\n\t"                                                    \
    "vpbroadcastd 16" A ", %%ymm13\n\t"                                                       \
    "vpmaddubsw %%ymm13, %%ymm2, %%ymm13\n\t"                                                 \
    "vpaddw %%ymm13, %%ymm12, %%ymm12\n\t"                                                    \
    "vpbroadcastd 20" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm3, %%ymm14\n\t"                                                 \
    "vpaddw %%ymm14, %%ymm12, %%ymm12\n\t"                                                    \
    "vpmaddwd %[ones], %%ymm12, %%ymm12\n\t"                                                  \
    "vpbroadcastd 24" A ", %%ymm13\n\t"                                                       \
    "vpmaddubsw %%ymm13, %%ymm4, %%ymm15\n\t"                                                 \
    "vpbroadcastd 28" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm5, %%ymm14\n\t"                                                 \
    "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                                    \
    "vpbroadcastd 32" A ", %%ymm13\n\t"                                                       \
    "vpmaddubsw %%ymm13, %%ymm6, %%ymm13\n\t"                                                 \
    "vpaddw %%ymm13, %%ymm15, %%ymm15\n\t"                                                    \
    "vpbroadcastd 36" A ", %%ymm14\n\t"                                                       \
    "vpmaddubsw %%ymm14, %%ymm7, %%ymm14\n\t"                                                 \
    "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                                    \
    "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                                  \
    "vpaddd %%ymm15, %%ymm12, %%ymm12\n\t"                                                    \
    "vcvtdq2ps %%ymm12, %%ymm12\n\t"                                                          \
    "vbroadcastss " A ", %%ymm13\n\t"                                                         \
    "vmulps 256(%[p]), %%ymm13, %%ymm13\n\t"                                                  \
    "vfmadd231ps %%ymm13, %%ymm12, %%ymm" ACC "\n\t"

#define QMM_ASM_TOKEN_NARROW(A, ACC) QMM_ASM_NARROW(A, ACC, "", "")
#define QMM_ASM_TOKEN_WIDE(A, ACC) QMM_ASM_WIDE(A, ACC)
#define QMM_ASM_TOKEN_Q4_0(A, ACC) QMM_ASM_NARROW(A, ACC, "", QMM_ASM_ZERO_POINT_Q4_0(A))
#define QMM_ASM_TOKEN_Q5_0(A, ACC) QMM_ASM_NARROW(A, ACC, QMM_ASM_ZERO_POINT_Q5_0(A), "")

/* Q6_K's unpacked blocks (gemv8_k6_tokens): d sc_0 in d, d sc_1 in m, each
 * half's pair sums two vectors at a time in int16, then int32. */
#define QMM_ASM_HALF_K6(A, K0, K1, K2, K3, QD, OFF, ACC)                                     \
    "vpbroadcastd " QD "+0" A ", %%ymm13\n\t"                                                 \
    "vpmaddubsw %%ymm13, %%ymm" K0 ", %%ymm12\n\t"                                            \
    "vpbroadcastd " QD "+4" A ", %%ymm14\n\t"                                                 \
    "vpmaddubsw %%ymm14, %%ymm" K1 ", %%ymm14\n\t"                                            \
    "vpaddw %%ymm14, %%ymm12, %%ymm12\n\t"                                                    \
    "vpmaddwd %[ones], %%ymm12, %%ymm12\n\t"                                                  \
    "vpbroadcastd " QD "+8" A ", %%ymm13\n\t"                                                 \
    "vpmaddubsw %%ymm13, %%ymm" K2 ", %%ymm15\n\t"                                            \
    "vpbroadcastd " QD "+12" A ", %%ymm14\n\t"                                                \
    "vpmaddubsw %%ymm14, %%ymm" K3 ", %%ymm14\n\t"                                            \
    "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                                    \
    "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                                  \
    "vpaddd %%ymm15, %%ymm12, %%ymm12\n\t"                                                    \
    "vcvtdq2ps %%ymm12, %%ymm12\n\t"                                                          \
    "vbroadcastss " A ", %%ymm13\n\t"                                                         \
    "vmulps " OFF "(%[p]), %%ymm13, %%ymm13\n\t"                                              \
    "vfmadd231ps %%ymm13, %%ymm12, %%ymm" ACC "\n\t"

#define QMM_ASM_TOKEN_K6(A, ACC)                                                             \
    QMM_ASM_HALF_K6(A, "0", "1", "2", "3", "8", "256", ACC)                                   \
    QMM_ASM_HALF_K6(A, "4", "5", "6", "7", "24", "288", ACC)

/* Zero the accumulators, run TOKEN for the 4 tokens of every block, store
 * the accumulators to out[t]. */
#define QMM_ASM_LOOP(TOKEN)                                                                  \
    "vpxor %%xmm8, %%xmm8, %%xmm8\n\t"                                                        \
    "vpxor %%xmm9, %%xmm9, %%xmm9\n\t"                                                        \
    "vpxor %%xmm10, %%xmm10, %%xmm10\n\t"                                                     \
    "vpxor %%xmm11, %%xmm11, %%xmm11\n\t"                                                     \
    "test %[n], %[n]\n\t"                                                                     \
    "jle 2f\n\t"                                                                              \
    "1:\n\t"                                                                                  \
    "vmovdqa 0(%[p]), %%ymm0\n\t"                                                             \
    "vmovdqa 32(%[p]), %%ymm1\n\t"                                                            \
    "vmovdqa 64(%[p]), %%ymm2\n\t"                                                            \
    "vmovdqa 96(%[p]), %%ymm3\n\t"                                                            \
    "vmovdqa 128(%[p]), %%ymm4\n\t"                                                           \
    "vmovdqa 160(%[p]), %%ymm5\n\t"                                                           \
    "vmovdqa 192(%[p]), %%ymm6\n\t"                                                           \
    "vmovdqa 224(%[p]), %%ymm7\n\t"                                                           \
    TOKEN("(%[x])", "8")                                                                      \
    TOKEN("(%[x],%[l])", "9")                                                                 \
    TOKEN("(%[x],%[l],2)", "10")                                                              \
    TOKEN("(%[x],%[l3])", "11")                                                               \
    "add $320, %[p]\n\t"                                                                      \
    "add %[xsz], %[x]\n\t"                                                                    \
    "dec %[n]\n\t"                                                                            \
    "jnz 1b\n\t"                                                                              \
    "2:\n\t"                                                                                  \
    "vmovups %%ymm8, 0(%[out])\n\t"                                                           \
    "vmovups %%ymm9, 32(%[out])\n\t"                                                          \
    "vmovups %%ymm10, 64(%[out])\n\t"                                                         \
    "vmovups %%ymm11, 96(%[out])\n\t"

_Static_assert(sizeof(struct qmm_pack8) == 320 && offsetof(struct qmm_pack8, d) == 256,
               "the assembly's block offsets");
_Static_assert(offsetof(struct qmm_q8, qs) == 8 && offsetof(struct qmm_q8, sum8) == 48 &&
                   offsetof(struct qmm_q8, sum16_pairs) == 56,
               "the assembly's token offsets");

/* The token steps of the assembly loop: 4-bit quants, 5-bit ones, those of
 * Q4_0 and Q5_0 with their zero points, Q6_K. */
enum qmm_asm_form { ASM_NARROW, ASM_WIDE, ASM_Q4_0, ASM_Q5_0, ASM_K6 };

#define QMM_ASM(TOKEN)                                                                       \
    __asm__ volatile(QMM_ASM_LOOP(TOKEN)                                                      \
                     : [p] "+r"(p), [x] "+r"(x), [n] "+r"(n_blk)                              \
                     : [l] "r"(l), [l3] "r"(l3), [out] "r"(acc), [ones] "m"(ones),            \
                       [xsz] "i"(sizeof *x)                                                   \
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",        \
                       "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",  \
                       "memory", "cc")

/* acc[t] = the f32 sums of gemm8_tokens's main loop for QMM_NT tokens. */
AVX2 static void gemm8_4tokens_asm(const struct qmm_pack8 *p, int64_t n_blk,
                                   const struct qmm_q8 *x, int64_t ldx, __m256 acc[QMM_NT],
                                   const enum qmm_asm_form form)
{
    static const int16_t ones[16] __attribute__((aligned(32))) = {1, 1, 1, 1, 1, 1, 1, 1,
                                                                  1, 1, 1, 1, 1, 1, 1, 1};
    int64_t l = ldx * (int64_t)sizeof *x, l3 = 3 * l;
    if (form == ASM_NARROW)
        QMM_ASM(QMM_ASM_TOKEN_NARROW);
    else if (form == ASM_WIDE)
        QMM_ASM(QMM_ASM_TOKEN_WIDE);
    else if (form == ASM_Q4_0)
        QMM_ASM(QMM_ASM_TOKEN_Q4_0);
    else if (form == ASM_Q5_0)
        QMM_ASM(QMM_ASM_TOKEN_Q5_0);
    else
        QMM_ASM(QMM_ASM_TOKEN_K6);
}

#endif
