/* bench/qmm_cpu.c: CPU time of the int8 kernels of ops/qmatmul*.c on each
 * ISA this CPU runs (AVX2, AVX-VNNI, AVX-512 VNNI), for Q4_0, Q4_1, Q8_0 and Q5_0 weights
 * of 576 columns (SmolLM2-135M's width) in the packed decode layout:
 *   gemv TYPE ISA cache   one token, 192 groups of 8 rows (1536 rows, in L2)
 *   gemv TYPE ISA memory  one token, 256 MiB of groups (from memory)
 *   gemm TYPE ISA         64 tokens through the packed prefill GEMM (AVX2
 *                         Q8_0: the GEMV kernel, which serves every count)
 *   gemm16 TYPE ISA       the same through the 16-row GEMM (AVX512-VNNI)
 * GB/s of weight bytes for the GEMV, G multiply-adds/s for the GEMM, best of
 * several passes, 1 thread. Weights are arbitrary bytes with f16 scales of
 * 1.0: the kernels' speed does not depend on the values. A benchmark, not a
 * test (tests/cpu/test_qmatmul.c checks the kernels).
 *
 *   cc -O2 -I. -Ibuild/generated bench/qmm_cpu.c build/libignite_core.a \
 *      -lm -lpthread -o build/qmm_cpu && build/qmm_cpu */
#include "ops/qmatmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint8_t *make_groups(size_t pb, int64_t n_blk, int64_t groups)
{
    size_t bytes = (size_t)(groups * n_blk) * pb;
    uint8_t *p = malloc(bytes);
    if (!p)
        return NULL;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)((i * 2654435761u) >> 13);
    for (size_t b = 0; b < (size_t)(groups * n_blk); b++)
        for (int j = 0; j < 16; j += 2) /* the 8 f16 scales (and offsets) = 1.0 */
            p[b * pb + (size_t)j] = 0x00, p[b * pb + (size_t)j + 1] = 0x3c;
    return p;
}

int main(void)
{
    const enum quant_type types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q8_0, QUANT_Q5_0};
    const char *names[] = {"q4_0", "q4_1", "q8_0", "q5_0"};
    const int64_t cols = 576, n_blk = cols / QMM_QK, nt = 64, small = 192;
    struct qmm_q8 *x = calloc((size_t)(nt * n_blk), sizeof *x);
    float *y = malloc((size_t)(nt * 8 * small) * sizeof *y);
    struct qmm_pack8 *pk = aligned_alloc(64, sizeof *pk * (size_t)(2 * n_blk));
    if (!x || !y || !pk)
        return 1;
    for (int64_t b = 0; b < nt * n_blk; b++) {
        x[b].d = 0.01f, x[b].s = 0.1f;
        for (int i = 0; i < QMM_QK; i++)
            x[b].qs[i] = (int8_t)((i + b) * 7 % 255 - 127);
    }
    for (int ti = 0; ti < 4; ti++) {
        size_t pb = ops_qmm_packed_block_bytes(types[ti]), gb = pb * (size_t)n_blk;
        int64_t big = (int64_t)((256u << 20) / gb);
        uint8_t *ps = make_groups(pb, n_blk, small), *pm = make_groups(pb, n_blk, big);
        if (!ps || !pm)
            return 1;
        for (int isa = QMM_AVX2; isa < QMM_N_ISA; isa++) {
            if (!ops_qmm_isa_runs((enum qmm_isa)isa))
                continue;
            const char *in = ops_qmm_isa_name((enum qmm_isa)isa);
            qmm_gemv8_fn gv = ops_qmm_gemv8(types[ti], (enum qmm_isa)isa);
            qmm_gemm8_fn gm = ops_qmm_gemm8_packed(types[ti], (enum qmm_isa)isa);
            if (!gv)
                continue;
            for (int mem = 0; mem < 2; mem++) {
                const uint8_t *p = mem ? pm : ps;
                int64_t groups = mem ? big : small;
                double best = 1e30;
                for (int r = 0; r < (mem ? 3 : 200); r++) {
                    double t0 = cpu_now();
                    for (int64_t g = 0; g < groups; g++)
                        gv(p + (size_t)g * gb, n_blk, x, n_blk, 1, 8, y, 8);
                    double t = cpu_now() - t0;
                    best = t < best ? t : best;
                }
                printf("gemv %s %s %s: %.1f GB/s\n", names[ti], in, mem ? "memory" : "cache",
                       (double)groups * (double)gb / best / 1e9);
            }
            double best = 1e30;
            for (int r = 0; r < 20; r++) {
                double t0 = cpu_now();
                for (int64_t g = 0; g < small; g++) {
                    const uint8_t *p = ps + (size_t)g * gb;
                    if (gm)
                        gm(p, 0, n_blk, x, n_blk, nt, y + g * 8, 8 * small, pk);
                    else
                        gv(p, n_blk, x, n_blk, nt, 8, y + g * 8, 8 * small);
                }
                double t = cpu_now() - t0;
                best = t < best ? t : best;
            }
            printf("gemm %s %s: %.1f G multiply-adds/s\n", names[ti], in,
                   (double)(small * 8 * cols * nt) / best / 1e9);
            qmm_gemm16_fn g16 = ops_qmm_gemm16_packed(types[ti], (enum qmm_isa)isa);
            if (!g16)
                continue;
            best = 1e30;
            for (int r = 0; r < 20; r++) {
                double t0 = cpu_now();
                for (int64_t g = 0; g + 2 <= small; g += 2)
                    g16(ps + (size_t)g * gb, gb, n_blk, x, n_blk, nt, y + g * 8, 8 * small, pk);
                double t = cpu_now() - t0;
                best = t < best ? t : best;
            }
            printf("gemm16 %s %s: %.1f G multiply-adds/s\n", names[ti], in,
                   (double)(small * 8 * cols * nt) / best / 1e9);
        }
        free(ps), free(pm);
    }
    free(x), free(y), free(pk);
    return 0;
}
