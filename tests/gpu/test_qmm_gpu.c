/* tests/gpu/test_qmm_gpu.c: the quantized-weight kernels of ops/gpu_qmm.h
 * on a real GPU (gk_*_cuda) against their CPU twins, every device type, at
 * model widths (4096 and 14336 columns, the rows of a few blocks of 16 or
 * 64 and ragged ones): the repack, random blocks (byte for byte), the
 * dequantization to f16 and the embedding lookup (bit for bit), the GEMV
 * for 1, 3 and 8 rows and the tensor-core product for 9 and 64 rows (300
 * for Q4_K); ragged row counts. Bounds:
 * the GEMV within (16 + blocks) 2^-24 M of its twin, M bounding every f32
 * term (tests/emu/test_qmm_emu.c); the tensor cores within the classic
 * bound of an f32 sum, (cols + 2) 2^-23 sum |f16(w) x| (as cuBLAS is held
 * to in tests/emu/device_checks.h). Exits 77 (skipped) without a CUDA
 * device. Label gpu. */
#include "ops/gpu_qmm.h"

#include "core/half.h"
#include "core/status.h"
#include "models/quant.h"
#include "tests/gpu/cuda_check.h"
#include "tests/quant_bound.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int k_types[] = {QUANT_Q4_0, QUANT_Q4_1, QUANT_Q5_0, QUANT_Q5_1,
                              QUANT_Q8_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};

static const char *tname(int type)
{
    return quant_type_name((uint32_t)type);
}

/* A matrix in host and device memory (planes in one buffer each). */
struct mat {
    struct gk_qmat h, d;
    size_t bytes;
};

static void mat_init(struct mat *m, int type, int64_t rows, int64_t cols)
{
    m->bytes = gk_qmat_bytes(type, rows, cols);
    void *hb = aligned_alloc(256, (m->bytes + 255) / 256 * 256), *db = NULL;
    memset(hb, 0, m->bytes);
    CK(cudaMalloc(&db, m->bytes));
    CK(cudaMemset(db, 0xa5, m->bytes));
    gk_qmat_carve(&m->h, type, rows, cols, hb);
    gk_qmat_carve(&m->d, type, rows, cols, db);
}

static void mat_free(struct mat *m)
{
    free(m->h.q);
    CK(cudaFree(m->d.q));
}

/* Whether the device planes equal the host's. */
static bool mat_same(const struct mat *m)
{
    struct gk_qlayout l;
    gk_qlayout_of(m->h.type, &l);
    size_t blocks = (size_t)(m->h.rows * (m->h.cols / l.block));
    uint8_t *t = malloc(blocks * (l.q > l.s ? l.q : l.s) + 64);
    bool same = true;
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(t, m->d.q, blocks * l.q, cudaMemcpyDeviceToHost));
    same &= memcmp(t, m->h.q, blocks * l.q) == 0;
    CK(cudaMemcpy(t, m->d.s, blocks * l.s, cudaMemcpyDeviceToHost));
    same &= memcmp(t, m->h.s, blocks * l.s) == 0;
    if (l.h) {
        CK(cudaMemcpy(t, m->d.h, blocks * l.h, cudaMemcpyDeviceToHost));
        same &= memcmp(t, m->h.h, blocks * l.h) == 0;
    }
    free(t);
    return same;
}

static void *dev_copy_of(const void *h, size_t bytes)
{
    return test_to_device(h, bytes);
}

static void *host_of(const void *d, size_t bytes)
{
    void *h = malloc(bytes);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* rows of the file's blocks: random quants, scales around 0.01 / 0.02. */
static uint8_t *rand_rows(int type, int64_t rows, int64_t cols, uint64_t *st)
{
    const struct quant_traits *t = quant_traits_of((uint32_t)type);
    size_t bytes = (size_t)rows * quant_row_bytes((enum quant_type)type, cols);
    uint8_t *r = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        r[i] = (uint8_t)test_rand_u64(st);
    for (size_t b = 0; b < bytes / t->block_bytes; b++) {
        uint8_t *blk = r + b * t->block_bytes;
        uint16_t d = ig_f32_to_f16(0.02f * test_rand_f(st)), m = ig_f32_to_f16(-0.1f);
        size_t at = type == QUANT_Q6_K ? offsetof(struct block_q6_K, d) : 0;
        memcpy(blk + at, &d, 2);
        if (type == QUANT_Q4_1 || type == QUANT_Q5_1 || type == QUANT_Q4_K || type == QUANT_Q5_K)
            memcpy(blk + 2, &m, 2);
    }
    return r;
}

static uint16_t *rand_x(int64_t n, int64_t cols, uint64_t *st)
{
    uint16_t *x = malloc((size_t)(n * cols) * 2);
    for (int64_t i = 0; i < n * cols; i++)
        x[i] = ig_f32_to_f16(2.0f * test_rand_f(st) * (test_rand_u64(st) % 97 ? 1 : 100));
    return x;
}

/* ---- layout and rows ------------------------------------------------------------ */

static void test_rows(int type, uint64_t *st)
{
    const int64_t rows = 77, cols = 4096;
    size_t rb = quant_row_bytes((enum quant_type)type, cols);
    uint8_t *src = rand_rows(type, rows, cols, st);
    void *dsrc = dev_copy_of(src, (size_t)rows * rb);
    struct mat m;
    mat_init(&m, type, rows, cols);
    gk_qrepack_ref(&m.h, src, rb);
    CHECK(gk_qrepack_cuda(&m.d, dsrc, rb, NULL) == IG_OK);
    CHECKF(mat_same(&m), "%s: device repack differs from the twin", tname(type));

    uint16_t *dq = NULL;
    CK(cudaMalloc((void **)&dq, (size_t)(rows * cols) * 2));
    CHECK(gk_qdequant_f16_cuda(&m.d, 0, rows, dq, NULL) == IG_OK);
    uint16_t *got = host_of(dq, (size_t)(rows * cols) * 2);
    uint16_t *want = malloc((size_t)(rows * cols) * 2);
    gk_qdequant_f16_ref(&m.h, 0, rows, want);
    CHECKF(memcmp(got, want, (size_t)(rows * cols) * 2) == 0, "%s: dequantization", tname(type));

    const int32_t tok[] = {76, 0, 33, 33};
    int32_t *dtok = dev_copy_of(tok, sizeof tok);
    float *dx = NULL;
    CK(cudaMalloc((void **)&dx, (size_t)(4 * cols) * 4));
    CHECK(gk_qembed_cuda(&m.d, dtok, 4, 0, dx, NULL) == IG_OK);
    float *x = host_of(dx, (size_t)(4 * cols) * 4), *x_ref = malloc((size_t)(4 * cols) * 4);
    gk_qembed_ref(&m.h, tok, 4, 0, x_ref);
    CHECKF(memcmp(x, x_ref, (size_t)(4 * cols) * 4) == 0, "%s: embedding", tname(type));

    CHECK(gk_qrandom_cuda(&m.d, 99, NULL) == IG_OK);
    gk_qrandom_ref(&m.h, 99);
    CHECKF(mat_same(&m), "%s: random blocks differ from the twin", tname(type));
    CK(cudaFree(dsrc));
    CK(cudaFree(dq));
    CK(cudaFree(dtok));
    CK(cudaFree(dx));
    free(src), free(got), free(want), free(x), free(x_ref);
    mat_free(&m);
}

/* ---- products ------------------------------------------------------------------ */

static void product_case(int type, int64_t rows, int64_t cols, int64_t n, bool mma, uint64_t *st)
{
    size_t rb = quant_row_bytes((enum quant_type)type, cols);
    uint8_t *src = rand_rows(type, rows, cols, st);
    struct mat m;
    mat_init(&m, type, rows, cols);
    gk_qrepack_ref(&m.h, src, rb);
    CK(cudaMemcpy(m.d.q, m.h.q, m.bytes, cudaMemcpyHostToDevice)); /* planes: one buffer */
    uint16_t *hx = rand_x(n, cols, st);
    uint16_t *dx = dev_copy_of(hx, (size_t)(n * cols) * 2);
    float *dy = NULL;
    CK(cudaMalloc((void **)&dy, (size_t)(n * rows) * 4));
    struct gk_qgemv_params p = {.w = m.d, .x = dx, .ld_x = cols, .n = n, .y = dy, .ld_y = rows};
    CHECKF((mma ? gk_qmma_cuda(&p, NULL) : gk_qgemv_cuda(&p, NULL)) == IG_OK,
           "%s %s %lldx%lld n %lld: launch", tname(type), mma ? "qmma" : "qgemv",
           (long long)rows, (long long)cols, (long long)n);
    float *y = host_of(dy, (size_t)(n * rows) * 4), *yr = malloc((size_t)(n * rows) * 4);
    p.w = m.h, p.x = hx, p.y = yr;
    if (mma)
        gk_qmma_ref(&p);
    else
        gk_qgemv_ref(&p);
    float *wf = malloc((size_t)cols * sizeof *wf);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        quant_dequantize_row((enum quant_type)type, src + r * rb, wf, cols);
        for (int64_t t = 0; t < n; t++) {
            double mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                double xv = fabs(ig_f16_to_f32(hx[t * cols + c]));
                mag += mma ? fabs(ig_f16_to_f32(ig_f32_to_f16(wf[c]))) * xv
                           : test_quant_term_bound(type, src + r * rb, c) * xv;
            }
            double tol = mma ? (double)(cols + 2) * 0x1p-23 * mag
                             : (double)(16 + cols / 32) * 0x1p-24 * mag;
            double a = y[t * rows + r], b = yr[t * rows + r];
            if (!(fabs(a - b) <= tol + 1e-30) && bad++ < 3)
                fprintf(stderr, "%s %s %lldx%lld n %lld: y[%lld][%lld] gpu %.9g twin %.9g\n",
                        tname(type), mma ? "qmma" : "qgemv", (long long)rows, (long long)cols,
                        (long long)n, (long long)t, (long long)r, a, b);
        }
    }
    CHECKF(bad == 0, "%s %s %lld x %lld n %lld: %d outputs off the twin", tname(type),
           mma ? "qmma" : "qgemv", (long long)rows, (long long)cols, (long long)n, bad);
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    free(src), free(hx), free(y), free(yr), free(wf);
    mat_free(&m);
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "skip: no CUDA device\n");
        return 77;
    }
    uint64_t st = 0x5eed;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        int type = k_types[i];
        test_rows(type, &st);
        product_case(type, 33, 4096, 1, false, &st);
        product_case(type, 160, 14336, 1, false, &st);
        product_case(type, 33, 4096, 3, false, &st);
        product_case(type, 64, 14336, 8, false, &st);
        product_case(type, 200, 4096, 9, true, &st);
        product_case(type, 64, 4096, 64, true, &st);
        if (type == QUANT_Q4_K)
            product_case(type, 130, 4096, 300, true, &st);
    }
    return test_summary("test_qmm_gpu");
}
