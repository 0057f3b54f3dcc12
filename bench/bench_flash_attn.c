/* bench/bench_flash_attn.c: times the prefill attention kernel
 * (prefill_attn_cuda) on the GPU: B = 1, causal, bf16, pos0 = 0, the cache
 * write included. One line per shape and variant on stdout:
 *   flash_attn variant=m64w4 n_head=32 n_head_kv=8 hd=128 n=4096 ms=... tflops=...
 * FLOPs counted as 4 * hd * n_head * n(n+1)/2 (the causal half of QK^T and PV).
 * Usage: bench_flash_attn [--variant NAME|all|auto] [--paged] [--pos0 P]
 *                         [n_head n_head_kv hd n...];
 * without sizes a default sweep; without --variant the chooser's pick
 * ("auto"); "all" times every variant built for the head dim on the same
 * buffers (made once for the largest n). `bench_flash_attn --list HD` prints
 * the variants built for head dim HD that this device can run, one name a
 * line (a script runs each in a process of its own, so one that faults the
 * context cannot cost the others their figures). The ws variants take
 * their work items from a counter (prefill_attn_params.tile_counter, the
 * backend's dynamic schedule); IGNITE_WS_STATIC=1 times them on the static
 * schedule instead (the A/B pair). `--pos0 P` puts each chunk after P
 * cached positions (random rows in the cache; FLOPs count them: 4 * hd *
 * n_head * (n P + n(n+1)/2)); lines then end in " pos0=P". `--paged` times
 * each variant that reads a paged cache (mma.sync, ws of whole 64-key tiles)
 * a second time on the same shape through params.block_table: the same
 * memory as a pool of 64-position blocks, the table a shuffled permutation
 * (as a batch engine's pool after some traffic); those lines end in
 * " paged=1" (scripts/gpu/attn_paged_table.py pairs them with the
 * unpaged ones: issue 44's "within 5 %"); under "auto" the unpaged pick's
 * kernel, none when it reads no pool. Exits 77 without a GPU.
 * Driven by bench/sdpa_compare.py and scripts/gpu/attn_speed.sh. */
#include "prefill/flash_attn.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                \
            fprintf(stderr, "bench_flash_attn: %s: %s (%s:%d)\n", #call,        \
                    cudaGetErrorString(e_), __FILE__, __LINE__);                \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static void *dev_random(size_t elems, unsigned seed)
{
    uint16_t *h = (uint16_t *)malloc(elems * 2);
    for (size_t i = 0; i < elems; i++) {
        seed = seed * 1664525u + 1013904223u;
        /* bf16 in about [-1, 1]: sign, exponent 0x7e or 0x7d, random mantissa */
        h[i] = (uint16_t)((seed >> 16 & 0x8000u) | (0x3e80u + (seed >> 8 & 0x17fu)));
    }
    void *d = NULL;
    CK(cudaMalloc(&d, elems * 2));
    CK(cudaMemcpy(d, h, elems * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* Back-to-back launches between two events, after 3 warm-up calls; a first
 * batch of 5 sizes a batch of about 40 ms. Returns ms per call, or < 0. */
static float time_variant(struct prefill_attn_params *p, int variant)
{
    p->variant = variant;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        if (prefill_attn_cuda(p, NULL))
            return -1;
    CK(cudaDeviceSynchronize());
    float ms = 0;
    int iters = 5;
    for (int pass = 0; pass < 2; pass++) {
        CK(cudaEventRecord(a, NULL));
        for (int i = 0; i < iters; i++)
            if (prefill_attn_cuda(p, NULL))
                return -1;
        CK(cudaEventRecord(b, NULL));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (pass == 0) {
            int want = ms > 0.0f ? (int)(40.0f / (ms / (float)iters)) : 1000;
            iters = want < 5 ? 5 : (want > 1000 ? 1000 : want);
        }
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms / (float)iters;
}

/* Device buffers for every n up to n_max of one head count and head dim,
 * made once per process (random bf16 written from the host: seconds at
 * n = 16384, more than the timings themselves). */
struct bufs {
    int64_t n_head, n_head_kv, hd, n_max, pos0, n_ctx, n_blocks;
    void *q, *k, *v, *k_cache, *v_cache, *o;
    float *lse;
    uint32_t *tiles; /* the ws variants' work counter, zero between launches */
    int32_t *table;  /* --paged: the pool's blocks in a shuffled order */
};

/* n_ctx = pos0 + n_max cache rows a KV head, rounded up to whole 64-row
 * blocks: the contiguous cache and the pool are the same bytes. */
static void bufs_make(struct bufs *b, int64_t n_head, int64_t n_head_kv, int64_t hd, int64_t n_max,
                      int64_t pos0)
{
    b->n_head = n_head, b->n_head_kv = n_head_kv, b->hd = hd, b->n_max = n_max, b->pos0 = pos0;
    b->n_blocks = (pos0 + n_max + 63) / 64, b->n_ctx = b->n_blocks * 64;
    b->q = dev_random((size_t)(n_max * n_head * hd), 1);
    b->k = dev_random((size_t)(n_max * n_head_kv * hd), 2);
    b->v = dev_random((size_t)(n_max * n_head_kv * hd), 3);
    b->k_cache = dev_random((size_t)(b->n_ctx * n_head_kv * hd), 4);
    b->v_cache = dev_random((size_t)(b->n_ctx * n_head_kv * hd), 5);
    b->o = dev_random((size_t)(n_max * n_head * hd), 6);
    CK(cudaMalloc((void **)&b->lse, (size_t)(n_max * n_head) * sizeof(float)));
    CK(cudaMalloc((void **)&b->tiles, 2 * sizeof(uint32_t)));
    CK(cudaMemset(b->tiles, 0, 2 * sizeof(uint32_t)));
    /* Fisher-Yates over the block ids: neighbouring positions far apart */
    int32_t *h = (int32_t *)malloc((size_t)b->n_blocks * sizeof(int32_t));
    unsigned seed = 7;
    for (int64_t i = 0; i < b->n_blocks; i++)
        h[i] = (int32_t)i;
    for (int64_t i = b->n_blocks - 1; i > 0; i--) {
        seed = seed * 1664525u + 1013904223u;
        int64_t j = (int64_t)(seed >> 8) % (i + 1);
        int32_t t = h[i];
        h[i] = h[j], h[j] = t;
    }
    CK(cudaMalloc((void **)&b->table, (size_t)b->n_blocks * sizeof(int32_t)));
    CK(cudaMemcpy(b->table, h, (size_t)b->n_blocks * sizeof(int32_t), cudaMemcpyHostToDevice));
    free(h);
}

static void bufs_free(struct bufs *b)
{
    const void *all[] = {b->q, b->k, b->v, b->k_cache, b->v_cache, b->o, b->lse, b->tiles,
                         b->table};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        CK(cudaFree((void *)all[i]));
}

/* The same call through the pool: block b of positions b*64 .. b*64+63 is
 * table[b]'s [n_head_kv][64][hd] (flash_attn.h's paged layout). */
static void make_paged(struct prefill_attn_params *p, const struct bufs *b)
{
    p->block_table = b->table, p->block_rows = 64, p->n_blocks = b->n_blocks;
    p->cache_row_stride = b->hd, p->cache_head_stride = 64 * b->hd;
    p->cache_block_stride = b->n_head_kv * 64 * b->hd;
}

/* One timed line; 1 when the chooser or the launch refused it. */
static int time_line(struct prefill_attn_params *p, int v, const char *tail, double flops)
{
    float ms = time_variant(p, v);
    struct prefill_attn_tile t;
    if (ms < 0 || prefill_attn_choose(p, &t)) {
        /* a launch the chooser or the runtime refused: the other variants still run */
        fprintf(stderr, "bench_flash_attn: variant %s failed (hd %lld, n %lld%s)\n",
                v ? prefill_attn_variant_name(v) : "auto", (long long)p->head_dim,
                (long long)p->n_tokens, p->block_table ? ", paged" : "");
        return 1;
    }
    char pos[40] = "";
    if (p->pos0)
        snprintf(pos, sizeof pos, " pos0=%lld", (long long)p->pos0);
    printf("flash_attn variant=%s n_head=%lld n_head_kv=%lld hd=%lld n=%lld ms=%.4f "
           "tflops=%.2f%s%s%s\n", prefill_attn_variant_name(t.variant), (long long)p->n_head,
           (long long)p->n_head_kv, (long long)p->head_dim, (long long)p->n_tokens, ms,
           flops / (ms * 1e-3) / 1e12,
           t.isa == PREFILL_ATTN_ISA_WS && !p->tile_counter ? " schedule=static" : "", pos, tail);
    fflush(stdout);
    return 0;
}

/* variant: an enum prefill_attn_variant, or -1 for every one built for hd.
 * paged: each variant that reads a pool timed again through it. */
static int bench(const struct bufs *b, int64_t n, int variant, int paged)
{
    const int64_t n_head = b->n_head, n_head_kv = b->n_head_kv, hd = b->hd;
    struct prefill_attn_params p = {0};
    p.q = b->q, p.k = b->k, p.v = b->v, p.k_cache = b->k_cache, p.v_cache = b->v_cache;
    p.o = b->o, p.lse = b->lse;
    p.n_tokens = n, p.pos0 = b->pos0, p.n_ctx = b->n_ctx, p.n_head = n_head, p.n_head_kv = n_head_kv;
    p.head_dim = hd;
    p.q_row_stride = n_head * hd, p.q_head_stride = hd;
    p.k_row_stride = p.v_row_stride = n_head_kv * hd;
    p.k_head_stride = p.v_head_stride = hd;
    p.o_row_stride = n_head * hd, p.o_head_stride = hd;
    p.cache_row_stride = hd, p.cache_head_stride = b->n_ctx * hd;
    p.lse_head_stride = b->n_max;
    p.scale = 1.0f / sqrtf((float)hd);
    p.dtype = PREFILL_ATTN_BF16;
    const char *st = getenv("IGNITE_WS_STATIC");
    p.tile_counter = st && strcmp(st, "1") == 0 ? NULL : b->tiles;

    int failed = 0;
    const double flops = 4.0 * (double)hd * (double)n_head * (double)n *
                         ((double)b->pos0 + (double)(n + 1) / 2.0);
    int first = variant < 0 ? PREFILL_ATTN_AUTO + 1 : variant;
    int last = variant < 0 ? PREFILL_ATTN_N_VARIANTS - 1 : variant;
    for (int v = first; v <= last; v++) {
        if (v != PREFILL_ATTN_AUTO && !prefill_attn_variant_supports(v, hd))
            continue;
        if (v != PREFILL_ATTN_AUTO && !prefill_attn_cuda_supports(v)) {
            fprintf(stderr, "bench_flash_attn: variant %s cannot run on this device or build, "
                    "skipped\n", prefill_attn_variant_name(v));
            continue;
        }
        if (time_line(&p, v, "", flops)) {
            failed = 1;
            continue;
        }
        struct prefill_attn_tile t;
        if (!paged || prefill_attn_choose(&p, &t) ||
            !(t.isa == PREFILL_ATTN_ISA_MMA || (t.isa == PREFILL_ATTN_ISA_WS && t.block_n % 64 == 0)))
            continue; /* the wgmma variants and ws ones of 32-key tiles read no pool */
        struct prefill_attn_params pp = p;
        make_paged(&pp, b);
        if (v == PREFILL_ATTN_AUTO)
            pp.variant = t.variant; /* the unpaged line's pick: the pair is one kernel */
        failed |= time_line(&pp, pp.variant, " paged=1", flops);
    }
    return failed;
}

int main(int argc, char **argv)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "bench_flash_attn: no CUDA device\n");
        return 77;
    }
    if (argc == 3 && strcmp(argv[1], "--list") == 0) {
        for (int v = PREFILL_ATTN_AUTO + 1; v < PREFILL_ATTN_N_VARIANTS; v++)
            if (prefill_attn_variant_supports(v, atoll(argv[2])) && prefill_attn_cuda_supports(v))
                printf("%s\n", prefill_attn_variant_name(v));
        return 0;
    }
    int variant = PREFILL_ATTN_AUTO, paged = 0;
    int64_t pos0 = 0;
    while (argc >= 2 && strncmp(argv[1], "--", 2) == 0) {
        if (strcmp(argv[1], "--paged") == 0) {
            paged = 1, argc -= 1, argv += 1;
            continue;
        }
        if (argc >= 3 && strcmp(argv[1], "--pos0") == 0) {
            char *end = NULL;
            pos0 = strtoll(argv[2], &end, 10);
            if (!*argv[2] || *end || pos0 < 0 || pos0 > (1 << 24)) {
                fprintf(stderr, "bench_flash_attn: --pos0 %s: a count of cached positions "
                        "0 .. 16777216 expected\n", argv[2]);
                return 2;
            }
        } else if (argc >= 3 && strcmp(argv[1], "--variant") == 0) {
            if (strcmp(argv[2], "all") == 0)
                variant = -1;
            else if (strcmp(argv[2], "auto") != 0 &&
                     (variant = prefill_attn_variant_find(argv[2])) == PREFILL_ATTN_AUTO) {
                fprintf(stderr, "bench_flash_attn: no variant %s\n", argv[2]);
                return 2;
            }
        } else {
            fprintf(stderr, "bench_flash_attn: unknown option %s (usage: bench_flash_attn "
                    "[--variant NAME|all|auto] [--paged] [--pos0 P] [n_head n_head_kv hd n...] "
                    "| --list HD)\n", argv[1]);
            return 2;
        }
        argc -= 2, argv += 2;
    }
    int failed = 0; /* a failed variant is reported; the sweep goes on */
    struct bufs b;
    if (argc >= 5) {
        int64_t n_max = 1;
        for (int i = 4; i < argc; i++)
            n_max = atoll(argv[i]) > n_max ? atoll(argv[i]) : n_max;
        bufs_make(&b, atoll(argv[1]), atoll(argv[2]), atoll(argv[3]), n_max, pos0);
        for (int i = 4; i < argc; i++)
            failed |= bench(&b, atoll(argv[i]), variant, paged);
        bufs_free(&b);
        return failed;
    }
    static const int64_t hds[] = {128, 64}, ns[] = {512, 1024, 2048, 4096, 8192, 16384};
    for (size_t h = 0; h < 2; h++) {
        bufs_make(&b, 32, 8, hds[h], ns[5], pos0);
        for (size_t i = 0; i < 6; i++)
            failed |= bench(&b, ns[i], variant, paged);
        bufs_free(&b);
    }
    return failed;
}
