/* bench/bench_decode_kernels.c: memory bandwidth of the decode kernels on
 * the GPU against a device-to-device cudaMemcpy measured in the same run:
 * gk_gemv_f16 (4096x4096, 14336x4096, 4096x14336, 128256x4096) and
 * decode_attn (Llama-3-8B shapes: 32 query / 8 KV heads, hd 128; one
 * sequence at n_ctx 4096 and 32768, 64 sequences at 640, each query at
 * n_ctx - 1, through block tables of the pool layout). Random data; the operands rotate over copies
 * totalling > 256 MiB so the 50 MiB L2 does not serve them. One line each:
 *   gemv rows=4096 cols=4096 us=... GBps=... of_copy=0.87
 * Bytes counted: what the kernel must read and write once (copy: read +
 * write). First one launch of each shape is checked against its CPU twin
 * (exit 1 on a mismatch). decode_attn again with the combine in the last
 * split (tickets: decode_attn_fused lines, the tickets checked back at 0
 * after the timed launches) writing o's int8 blocks for the wo GEMV too, as
 * a fused decode step does (oq: checked bit for bit against
 * ops_qmm_quantize of the GPU's o; their bytes counted); 256 sequences at 640 (the batched step's
 * decode attention, issue 44's target); a verify step's q_len rows (5 and
 * 16) of one sequence at 4096 and 32768 (the bytes: the cache once, as
 * one row's: the rows share each K/V read). gk_greedy_rows (the batched greedy
 * step's token per row) on 1, 64 and 256 rows of Llama 3's 128256 logits,
 * each row's token checked against the twin:
 *   greedy rows=256 vocab=128256 us=... GBps=... of_copy=...
 * Exits 77 without a GPU. */
#include "decode/decode_attn.h"
#include "decode/greedy.h"
#include "ops/gpu_ops.h"

#include "core/half.h"
#include "kvcache/kv_devq.h"
#include "ops/qmatmul.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                \
            fprintf(stderr, "bench_decode_kernels: %s: %s (%s:%d)\n", #call,    \
                    cudaGetErrorString(e_), __FILE__, __LINE__);                \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#define ROTATE_BYTES ((size_t)256 << 20)

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint16_t rand_f16(float amp)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return ig_f32_to_f16(amp * (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1));
}

/* Host copy (returned) and device copy (*dev) of n random f16. */
static uint16_t *make_f16(size_t n, float amp, uint16_t **dev)
{
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        h[i] = rand_f16(amp);
    CK(cudaMalloc((void **)dev, n * 2));
    CK(cudaMemcpy(*dev, h, n * 2, cudaMemcpyHostToDevice));
    return h;
}

/* Host copy (returned) and device copy (*dev) of a quantized pool of `type`
 * (kvcache/kv_devq.h) holding `elems` values: random quants (fp8 without
 * its NaN), every scale 1/64. */
static uint16_t *make_kvq(size_t elems, int type, int64_t hd, uint16_t **dev)
{
    const size_t bytes = (size_t)kvq_region((int64_t)elems);
    unsigned char *h = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) {
        const unsigned r = (unsigned)rand_f16(1.0f) * 2654435761u >> 8;
        h[i] = (unsigned char)(type == KVQ_FP8 ? (r % 0x7e) | (r & 0x80) : r);
    }
    const uint16_t d = ig_f32_to_f16(1.0f / 64);
    for (size_t e = 0; e < elems; e += (size_t)(64 * hd))
        for (int64_t i = 0; i < 64 * hd / 32; i++)
            memcpy(h + kvq_region((int64_t)e) + 64 * hd + 2 * i, &d, 2);
    CK(cudaMalloc((void **)dev, bytes));
    CK(cudaMemcpy(*dev, h, bytes, cudaMemcpyHostToDevice));
    return (uint16_t *)h;
}

/* Copies of a device buffer until they total ROTATE_BYTES (at least 1). */
static int replicate(void *src, size_t bytes, void **copies, int max)
{
    int n = (int)((ROTATE_BYTES + bytes - 1) / bytes);
    n = n < 1 ? 1 : (n > max ? max : n);
    copies[0] = src;
    for (int i = 1; i < n; i++) {
        CK(cudaMalloc(&copies[i], bytes));
        CK(cudaMemcpy(copies[i], src, bytes, cudaMemcpyDeviceToDevice));
    }
    return n;
}

typedef int (*launch_fn)(void *ctx, int copy);

/* Average ms of one launch, about 100 ms of back-to-back launches. */
static float time_ms(launch_fn fn, void *ctx, int n_copies)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        if (fn(ctx, i % n_copies))
            exit(1);
    CK(cudaDeviceSynchronize());
    float ms = 0;
    int iters = 10;
    for (int pass = 0; pass < 2; pass++) {
        CK(cudaEventRecord(a, NULL));
        for (int i = 0; i < iters; i++)
            if (fn(ctx, i % n_copies))
                exit(1);
        CK(cudaEventRecord(b, NULL));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (pass == 0) {
            int want = ms > 0 ? (int)(100.0f / (ms / (float)iters)) : 1000;
            iters = want < 10 ? 10 : (want > 5000 ? 5000 : want);
        }
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms / (float)iters;
}

/* ---- device-to-device copy: the reference bandwidth ------------------------ */

struct copy_ctx {
    void *dst, *src;
    size_t bytes;
};

static int copy_launch(void *ctx, int copy)
{
    struct copy_ctx *c = ctx;
    (void)copy;
    CK(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, NULL));
    return 0;
}

static double copy_gbps(void)
{
    struct copy_ctx c = {NULL, NULL, (size_t)1 << 30};
    CK(cudaMalloc(&c.dst, c.bytes));
    CK(cudaMalloc(&c.src, c.bytes));
    CK(cudaMemset(c.src, 1, c.bytes));
    float ms = time_ms(copy_launch, &c, 1);
    CK(cudaFree(c.dst));
    CK(cudaFree(c.src));
    double gbps = 2.0 * (double)c.bytes / (ms * 1e-3) / 1e9;
    printf("copy bytes=%zu us=%.1f GBps=%.0f\n", c.bytes, ms * 1e3, gbps);
    return gbps;
}

/* ---- gk_gemv_f16 ----------------------------------------------------------- */

struct gemv_ctx {
    void *w[64];
    uint16_t *x;
    float *y;
    int64_t rows, cols;
};

static int gemv_launch(void *ctx, int copy)
{
    struct gemv_ctx *g = ctx;
    return gk_gemv_f16_cuda(g->w[copy], g->x, g->y, g->rows, g->cols, 0.0f, NULL);
}

static int bench_gemv(int64_t rows, int64_t cols, double copy)
{
    struct gemv_ctx g = {.rows = rows, .cols = cols};
    uint16_t *w0, *hw = make_f16((size_t)(rows * cols), 1.0f, &w0);
    uint16_t *hx = make_f16((size_t)cols, 1.0f, &g.x);
    CK(cudaMalloc((void **)&g.y, (size_t)rows * sizeof(float)));
    const size_t wbytes = (size_t)(rows * cols) * 2;
    int n = replicate(w0, wbytes, g.w, 64);

    /* One launch against the twin. */
    float *y = malloc((size_t)rows * sizeof(float)), *y_ref = malloc((size_t)rows * sizeof(float));
    if (gemv_launch(&g, 0))
        return 1;
    CK(cudaMemcpy(y, g.y, (size_t)rows * sizeof(float), cudaMemcpyDeviceToHost));
    gk_gemv_f16_ref(hw, hx, y_ref, rows, cols, 0.0f);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        double mag = 0;
        for (int64_t c = 0; c < cols; c++)
            mag += fabs((double)ig_f16_to_f32(hw[r * cols + c]) * ig_f16_to_f32(hx[c]));
        if (!(fabs((double)y[r] - y_ref[r]) <= 1e-5 * mag) && bad++ < 3)
            fprintf(stderr, "gemv %lldx%lld: y[%lld] gpu %.9g ref %.9g\n", (long long)rows,
                    (long long)cols, (long long)r, y[r], y_ref[r]);
    }

    float ms = time_ms(gemv_launch, &g, n);
    double bytes = (double)wbytes + 2.0 * (double)cols + 4.0 * (double)rows;
    double gbps = bytes / (ms * 1e-3) / 1e9;
    printf("gemv rows=%lld cols=%lld us=%.2f GBps=%.0f of_copy=%.3f check=%s\n", (long long)rows,
           (long long)cols, ms * 1e3, gbps, gbps / copy, bad ? "FAIL" : "ok");
    fflush(stdout);
    for (int i = 0; i < n; i++)
        CK(cudaFree(g.w[i]));
    CK(cudaFree(g.x));
    CK(cudaFree(g.y));
    free(hw), free(hx), free(y), free(y_ref);
    return bad != 0;
}

/* ---- gk_greedy_rows --------------------------------------------------------- */

struct greedy_ctx {
    void *x[64];
    int64_t rows, vocab;
    int32_t *ids;
};

static int greedy_launch(void *ctx, int copy)
{
    struct greedy_ctx *g = ctx;
    return gk_greedy_rows_cuda(g->x[copy], g->vocab, g->rows, g->vocab, g->ids, NULL);
}

static int bench_greedy(int64_t rows, int64_t vocab, double copy)
{
    struct greedy_ctx g = {.rows = rows, .vocab = vocab};
    const size_t n = (size_t)(rows * vocab);
    float *hx = malloc(n * sizeof(float)), *x0;
    for (size_t i = 0; i < n; i++)
        hx[i] = ig_f16_to_f32(rand_f16(8.0f));
    CK(cudaMalloc((void **)&x0, n * sizeof(float)));
    CK(cudaMemcpy(x0, hx, n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&g.ids, (size_t)rows * 4));
    const int nc = replicate(x0, n * sizeof(float), g.x, 64);

    int32_t *ids = malloc((size_t)rows * 4), *ids_ref = malloc((size_t)rows * 4);
    if (greedy_launch(&g, 0))
        return 1;
    CK(cudaMemcpy(ids, g.ids, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    gk_greedy_rows_ref(hx, vocab, rows, vocab, ids_ref);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++)
        if (ids[r] != ids_ref[r] && bad++ < 3)
            fprintf(stderr, "greedy rows=%lld: row %lld gpu %d ref %d\n", (long long)rows,
                    (long long)r, ids[r], ids_ref[r]);

    float ms = time_ms(greedy_launch, &g, nc);
    double gbps = (double)n * sizeof(float) / (ms * 1e-3) / 1e9;
    printf("greedy rows=%lld vocab=%lld us=%.2f GBps=%.0f of_copy=%.3f check=%s\n",
           (long long)rows, (long long)vocab, ms * 1e3, gbps, gbps / copy, bad ? "FAIL" : "ok");
    fflush(stdout);
    for (int i = 0; i < nc; i++)
        CK(cudaFree(g.x[i]));
    CK(cudaFree(g.ids));
    free(hx), free(ids), free(ids_ref);
    return bad != 0;
}

/* ---- decode_attn ------------------------------------------------------------ */

struct attn_ctx {
    struct decode_attn_params p;
    void *k[64], *v[64];
};

static int attn_launch(void *ctx, int copy)
{
    struct attn_ctx *a = ctx;
    struct decode_attn_params p = a->p;
    p.k_cache = a->k[copy];
    p.v_cache = a->v[copy];
    return decode_attn_cuda(&p, NULL);
}

/* Rows of the GPU's o (host copy ho, qo elements) whose int8 blocks in
 * p->oq, p->oqd (device) differ from ops_qmm_quantize of the row, bit for
 * bit; the first few reported. */
static int blocks_off(const struct decode_attn_params *p, const uint16_t *ho, size_t qo)
{
    const int64_t dim = p->n_head * p->head_dim, nb = dim / 32, rows = (int64_t)qo / dim;
    int8_t *q = malloc(qo);
    float *qd = malloc(qo / 32 * 8), *f = malloc((size_t)dim * sizeof *f);
    struct qmm_q8 *b = malloc((size_t)nb * sizeof *b);
    CK(cudaMemcpy(q, p->oq, qo, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(qd, p->oqd, qo / 32 * 8, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int64_t t = 0; t < rows; t++) {
        for (int64_t c = 0; c < dim; c++)
            f[c] = ig_f16_to_f32(ho[t * dim + c]);
        ops_qmm_quantize(f, dim, b);
        for (int64_t i = 0; i < nb; i++)
            if ((memcmp(q + t * dim + 32 * i, b[i].qs, 32) ||
                 memcmp(&qd[2 * (t * nb + i)], &b[i].d, 4) ||
                 memcmp(&qd[2 * (t * nb + i) + 1], &b[i].s, 4)) && bad++ < 3)
                fprintf(stderr, "attn seqs=%lld: row %lld's int8 block %lld of o differs from "
                        "ops_qmm_quantize's\n", (long long)p->n_seqs, (long long)t,
                        (long long)i);
    }
    free(q), free(qd), free(f), free(b);
    return bad;
}

/* n_seqs sequences of n_ctx positions each, q_len query rows each (a
 * verify step's: row r at n_ctx - q_len + r; one row: n_ctx - 1) in a pool
 * of n_seqs * n_ctx / 64 blocks; sequence s's table holds blocks s, s +
 * n_seqs, s + 2 n_seqs, ... (one sequence: consecutive blocks). */
static int bench_attn_t(int64_t n_seqs, int64_t n_head, int64_t n_head_kv, int64_t hd,
                        int64_t n_ctx, int n_sm, double copy, int fused, int64_t q_len,
                        int kvt)
{
    struct attn_ctx a;
    memset(&a, 0, sizeof a);
    struct decode_attn_params *p = &a.p;
    const int64_t ts = (n_ctx + 63) / 64, n_blocks = n_seqs * ts;
    const int64_t head_stride = 64 * hd, block_stride = n_head_kv * head_stride;
    const size_t cache = (size_t)(n_blocks * block_stride);
    const size_t qo = (size_t)(n_seqs * q_len * n_head * hd);
    uint16_t *q, *k0, *v0, *o;
    uint16_t *hq = make_f16(qo, 2.0f, &q);
    /* a quantized pool (kvt: KVQ_Q8_0 / KVQ_FP8) is 34 bytes a 32 values */
    const size_t cache_bytes = kvt ? (size_t)kvq_region((int64_t)cache) : cache * 2;
    uint16_t *hk = kvt ? make_kvq(cache, kvt, hd, &k0) : make_f16(cache, 1.0f, &k0);
    uint16_t *hv = kvt ? make_kvq(cache, kvt, hd, &v0) : make_f16(cache, 1.0f, &v0);
    CK(cudaMalloc((void **)&o, qo * 2));
    int32_t *pos = malloc((size_t)(n_seqs * q_len) * 4), *table = malloc((size_t)n_blocks * 4);
    for (int64_t s = 0; s < n_seqs; s++) {
        for (int64_t r = 0; r < q_len; r++)
            pos[s * q_len + r] = (int32_t)(n_ctx - q_len + r);
        for (int64_t i = 0; i < ts; i++)
            table[s * ts + i] = (int32_t)(i * n_seqs + s);
    }
    int32_t *dpos, *dtable;
    CK(cudaMalloc((void **)&dpos, (size_t)(n_seqs * q_len) * 4));
    CK(cudaMemcpy(dpos, pos, (size_t)(n_seqs * q_len) * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&dtable, (size_t)n_blocks * 4));
    CK(cudaMemcpy(dtable, table, (size_t)n_blocks * 4, cudaMemcpyHostToDevice));
    *p = (struct decode_attn_params){
        .q = q, .block_table = dtable, .table_stride = ts, .block_stride = block_stride,
        .head_stride = head_stride, .pos = dpos, .o = o, .n_seqs = n_seqs, .n_head = n_head,
        .n_head_kv = n_head_kv, .head_dim = hd, .n_ctx = n_ctx,
        .n_splits = decode_attn_choose_splits(n_ctx, n_seqs, n_head_kv, n_sm),
        .scale = 1.0f / sqrtf((float)hd), .q_len = q_len, .k_dtype = kvt, .v_dtype = kvt};
    CK(cudaMalloc((void **)&p->work, decode_attn_work_floats(p) * sizeof(float)));
    const size_t n_tickets = decode_attn_tickets(p);
    if (fused) { /* the combine in the last split: tickets 0 before, and after every launch */
        CK(cudaMalloc((void **)&p->tickets, n_tickets * 4));
        CK(cudaMemset(p->tickets, 0, n_tickets * 4));
        CK(cudaMalloc((void **)&p->oq, qo));
        CK(cudaMalloc((void **)&p->oqd, qo / 32 * 8));
    }
    int n = replicate(k0, cache_bytes, a.k, 32);
    replicate(v0, cache_bytes, a.v, n);

    uint16_t *ho = malloc(qo * 2), *ho_ref = malloc(qo * 2);
    if (attn_launch(&a, 0))
        return 1;
    CK(cudaMemcpy(ho, o, qo * 2, cudaMemcpyDeviceToHost));
    struct decode_attn_params pr = *p;
    pr.q = hq, pr.k_cache = hk, pr.v_cache = hv, pr.block_table = table, pr.pos = pos;
    pr.o = ho_ref;
    if (decode_attn_ref(&pr))
        return 1;
    int bad = 0;
    for (size_t i = 0; i < qo; i++) {
        double g = ig_f16_to_f32(ho[i]), r = ig_f16_to_f32(ho_ref[i]);
        if (!(fabs(g - r) <= 2e-3 * fmax(fabs(r), 0.05)) && bad++ < 3)
            fprintf(stderr, "attn seqs=%lld n_ctx=%lld: o[%zu] gpu %.6g ref %.6g\n",
                    (long long)n_seqs, (long long)n_ctx, i, g, r);
    }

    if (fused) /* o's int8 blocks: ops_qmm_quantize's of each row of the GPU's o */
        bad += blocks_off(p, ho, qo);

    float ms = time_ms(attn_launch, &a, n);
    if (fused) { /* after every timed launch the tickets are back to 0 */
        uint32_t *ht = malloc(n_tickets * 4);
        CK(cudaMemcpy(ht, p->tickets, n_tickets * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n_tickets; i++)
            if (ht[i] && bad++ < 3)
                fprintf(stderr, "attn seqs=%lld n_ctx=%lld: ticket %zu left at %u\n",
                        (long long)n_seqs, (long long)n_ctx, i, ht[i]);
        free(ht);
        CK(cudaFree(p->tickets));
        CK(cudaFree(p->oq));
        CK(cudaFree(p->oqd));
    }
    double bytes = 2.0 * (double)cache_bytes + 4.0 * (double)qo +
                   (fused ? (double)qo + (double)(qo / 32 * 8) : 0.0);
    double gbps = bytes / (ms * 1e-3) / 1e9;
    printf("decode_attn%s%s seqs=%lld q_len=%lld n_head=%lld n_head_kv=%lld hd=%lld n_ctx=%lld "
           "splits=%d us=%.2f GBps=%.0f of_copy=%.3f check=%s\n", fused ? "_fused" : "",
           kvt == KVQ_Q8_0 ? "_q8_0" : kvt == KVQ_FP8 ? "_fp8" : "",
           (long long)n_seqs, (long long)q_len, (long long)n_head, (long long)n_head_kv,
           (long long)hd, (long long)n_ctx, p->n_splits, ms * 1e3, gbps, gbps / copy,
           bad ? "FAIL" : "ok");
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        CK(cudaFree(a.k[i]));
        CK(cudaFree(a.v[i]));
    }
    CK(cudaFree(q));
    CK(cudaFree(o));
    CK(cudaFree(dpos));
    CK(cudaFree(dtable));
    CK(cudaFree(p->work));
    free(hq), free(hk), free(hv), free(ho), free(ho_ref), free(pos), free(table);
    return bad != 0;
}

static int bench_attn(int64_t n_seqs, int64_t n_head, int64_t n_head_kv, int64_t hd,
                      int64_t n_ctx, int n_sm, double copy, int fused, int64_t q_len)
{
    return bench_attn_t(n_seqs, n_head, n_head_kv, hd, n_ctx, n_sm, copy, fused, q_len, 0);
}

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "bench_decode_kernels: no CUDA device\n");
        return 77;
    }
    int n_sm = 0;
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    const double copy = copy_gbps();
    /* --kv: the attention over an f16, q8_0 and fp8 pool (issue 51), one
     * sequence of Llama-3-8B's heads at 4096 and 32768 positions and 8 at
     * 32768, fused combine; GB/s of the pool's own bytes */
    if (argc > 1 && !strcmp(argv[1], "--kv")) {
        int fail = 0;
        for (int t = KVQ_F16; t <= KVQ_FP8; t++) {
            fail |= bench_attn_t(1, 32, 8, 128, 4096, n_sm, copy, 1, 1, t);
            fail |= bench_attn_t(1, 32, 8, 128, 32768, n_sm, copy, 1, 1, t);
            fail |= bench_attn_t(8, 32, 8, 128, 32768, n_sm, copy, 1, 1, t);
        }
        return fail;
    }
    static const int64_t shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336},
                                        {128256, 4096}};
    int fail = 0;
    for (int i = 0; i < 4; i++)
        fail |= bench_gemv(shapes[i][0], shapes[i][1], copy);
    /* each also with the combine in the last split (IGNITE_GPU_FUSE's): the
     * GPU's blocks race for the tickets, which the emulator's never do */
    for (int fused = 0; fused < 2; fused++) {
        fail |= bench_attn(1, 32, 8, 128, 4096, n_sm, copy, fused, 1);
        fail |= bench_attn(1, 32, 8, 128, 32768, n_sm, copy, fused, 1);
        fail |= bench_attn(64, 32, 8, 128, 640, n_sm, copy, fused, 1); /* the batch's last decode */
        fail |= bench_attn(256, 32, 8, 128, 640, n_sm, copy, fused, 1); /* 256 x (512 in, 128 out) */
    }
    /* A verify step's attention (issue 50): k + 1 = 5 and 16 rows of one
     * sequence at 4096 and 32768 positions, against the one-row lines
     * above (k plain steps cost k of those). Qwen2.5 1.5B's heads too (12 /
     * 2, hd 128: 6 query heads a KV head, 3 (row, head) blocks at 5 rows). */
    static const int64_t verify_q[] = {5, 16};
    for (int i = 0; i < 2; i++) {
        fail |= bench_attn(1, 32, 8, 128, 4096, n_sm, copy, 1, verify_q[i]);
        fail |= bench_attn(1, 32, 8, 128, 32768, n_sm, copy, 1, verify_q[i]);
        fail |= bench_attn(1, 12, 2, 128, 4096, n_sm, copy, 1, verify_q[i]);
    }
    fail |= bench_attn(1, 12, 2, 128, 4096, n_sm, copy, 1, 1);
    static const int64_t greedy_rows[] = {1, 64, 256};
    for (int i = 0; i < 3; i++)
        fail |= bench_greedy(greedy_rows[i], 128256, copy);
    return fail;
}
