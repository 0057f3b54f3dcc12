/* tests/cpu/test_attn_qk.c: prefill/attn_decode_qk.c's register kernels
 * against the int8 matmul's tile kernel they stand in for (ops/qmatmul.h,
 * tested against fp64 by tests/cpu/test_qmatmul.c), bit for bit: q8_0 and
 * q4_0 K rows, head dims 32-256, 1-7 query rows (blocks of three, two and
 * one), keys from c0 to nc across the groups of four and a ragged end, on
 * every instruction set this CPU runs. The attention scores every quantized
 * K through them (decode rows and prompt items alike), so this is where
 * their agreement with the tile is witnessed. */
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/quant.h"
#include "ops/qmatmul.h"
#include "prefill/attn_decode_qk.h"
#include "tests/test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEYS 70
#define MAX_ROWS 7
#define SS 80 /* scores' row stride */

static uint64_t rng = 0x243f6a8885a308d3ull;

static int check(enum kv_dtype dt, enum qmm_isa isa, int64_t hd, int64_t rows, int64_t c0,
                 int64_t nc)
{
    attn_qk_fn qk = attn_decode_qk(dt, isa, hd);
    qmm_tile_fn tile = ops_qmm_tile(dt == KV_Q8_0 ? QUANT_Q8_0 : QUANT_Q4_0, isa);
    if (!qk || !tile)
        return 0;
    int64_t nb = hd / QMM_QK;
    size_t rb = kv_dtype_row_bytes(dt, hd);
    uint8_t *k = malloc(rb * MAX_KEYS);
    struct qmm_q8 *qq = malloc((size_t)(rows * nb) * sizeof *qq);
    float *x = malloc((size_t)hd * sizeof *x);
    float got[MAX_ROWS * SS], want[MAX_ROWS * SS];
    for (int64_t c = 0; c < nc; c++) {
        for (int64_t d = 0; d < hd; d++) /* scales that differ by key and block */
            x[d] = test_rand_f(&rng) * (float)(1 + (c + d / 32) % 5);
        quant_quantize_row(dt == KV_Q8_0 ? QUANT_Q8_0 : QUANT_Q4_0, x, k + c * rb, hd);
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t d = 0; d < hd; d++)
            x[d] = test_rand_f(&rng) * 0.3f;
        ops_qmm_quantize(x, hd, qq + r * nb);
    }
    for (int i = 0; i < MAX_ROWS * SS; i++)
        got[i] = want[i] = -7.0f;
    qk(qq, rows, k, c0, nc, hd, got, SS, NULL);
    for (int64_t r = 0; r < rows; r += QMM_NT) /* attn_tiled.c's scores_quant */
        for (int64_t c = c0; c < nc; c += QMM_MR) {
            int nt = rows - r < QMM_NT ? (int)(rows - r) : QMM_NT;
            int mr = nc - c < QMM_MR ? (int)(nc - c) : QMM_MR;
            tile(k + c * rb, rb, nb, qq + r * nb, nb, mr, nt, want + r * SS + c, SS);
        }
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < SS; c++)
            if (memcmp(&got[r * SS + c], &want[r * SS + c], sizeof got[0]) && bad++ < 3)
                fprintf(stderr, "%s isa %d hd %lld rows %lld keys %lld..%lld: [%lld][%lld] "
                        "%.9g, the tile %.9g\n", kv_dtype_name(dt), (int)isa, (long long)hd,
                        (long long)rows, (long long)c0, (long long)nc, (long long)r,
                        (long long)c, got[r * SS + c], want[r * SS + c]);
    CHECKF(bad == 0, "%s isa %d hd %lld rows %lld: %d scores differ from the tile's",
           kv_dtype_name(dt), (int)isa, (long long)hd, (long long)rows, bad);
    free(k);
    free(qq);
    free(x);
    return 1;
}

int main(void)
{
    static const int64_t hds[] = {32, 64, 96, 128, 256};
    static const int64_t spans[][2] = {{0, 64}, {0, 1}, {3, 9}, {5, 70}, {61, 64}};
    int ran = 0;
    for (int isa = QMM_AVX2; isa < QMM_N_ISA; isa++) {
        if (!ops_qmm_isa_runs((enum qmm_isa)isa))
            continue;
        for (int q8 = 0; q8 < 2; q8++)
            for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
                for (int64_t rows = 1; rows <= MAX_ROWS; rows++)
                    for (size_t s = 0; s < sizeof spans / sizeof spans[0]; s++)
                        ran += check(q8 ? KV_Q8_0 : KV_Q4_0, (enum qmm_isa)isa, hds[h], rows,
                                     spans[s][0], spans[s][1]);
    }
    if (!ran) {
        fprintf(stderr, "test_attn_qk: no register kernel on this CPU (skipped)\n");
        return 77; /* skipped */
    }
    fprintf(stderr, "test_attn_qk: %d cases\n", ran);
    return test_summary("test_attn_qk");
}
