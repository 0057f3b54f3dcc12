/* bench/attn_cpu.c: CPU time of prefill/attn_tiled.c at SmolLM2-135M's
 * shapes (9 query heads, 3 KV heads, head_dim 64, f16 cache; F32=1 for an
 * f32 cache): one layer's prefill of N tokens, then 128 decode rows at
 * positions N-128 .. N-1, each alone as a decode step runs it. Random
 * inputs, one thread unless told. CPU time (CLOCK_PROCESS_CPUTIME_ID), so a
 * loaded machine stretches it less than wall time. A benchmark, not a test;
 * it writes the outputs to OUT so two builds can be compared with cmp.
 *
 *   cc -O2 -I. -Ibuild/generated bench/attn_cpu.c build/libignite_core.a \
 *      -lm -lpthread -o build/attn_cpu
 *   build/attn_cpu OUT [threads=1] [N=2048]
 * env: NOPREFILL=1 (decode rows only), REPS=k (the decode rows k times),
 *      LAYERS=l (decode against l layers' caches in turn: l = 30 is 94 MB at
 *      N = 4096, so the cache comes from memory as in a real step), F32=1,
 *      EXACT=1 (the exact path's attention; else the int8 path's fused one),
 *      KV=q8_0|q4_0 (a quantized cache, K and V: rows quantized as a step
 *      writes them, kv_write_rows; F32 ignored). */
#include "core/half.h"
#include "kvcache/kvcache.h"
#include "prefill/attn_tiled.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 88172645463325252ull;

static float rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v ? atoi(v) : def;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: attn_cpu OUT [threads] [N]\n");
        return 2;
    }
    int64_t nh = 9, nkv = 3, hd = 64, npos = argc > 3 ? atoll(argv[3]) : 2048;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    const char *kvq = getenv("KV");
    enum kv_dtype qt = kvq && !strcmp(kvq, "q8_0") ? KV_Q8_0 : kvq && !strcmp(kvq, "q4_0") ? KV_Q4_0 : KV_F16;
    int f32 = qt == KV_F16 ? env_int("F32", 0) : 0, reps = env_int("REPS", 1), nl = env_int("LAYERS", 1);
    if (npos < 128 || threads < 1 || reps < 1 || nl < 1) {
        fprintf(stderr, "attn_cpu: N >= 128, threads, REPS, LAYERS >= 1\n");
        return 2;
    }
    int64_t nblk = (npos + KV_BLOCK - 1) / KV_BLOCK;
    size_t esz = f32 ? 4 : 2;
    int64_t head_stride = KV_BLOCK * hd, block_stride = nkv * head_stride;
    size_t layer_bytes = qt != KV_F16 ? kv_dtype_row_bytes(qt, nblk * block_stride)
                                      : (size_t)(nblk * block_stride) * esz;
    char *K = malloc(layer_bytes * (size_t)nl), *V = malloc(layer_bytes * (size_t)nl);
    int32_t *table = malloc((size_t)nblk * sizeof *table);
    float *q = malloc((size_t)(npos * nh * hd) * sizeof *q);
    float *out = malloc((size_t)(npos * nh * hd) * sizeof *out);
    int64_t sf = attn_tiled_scratch_floats(nh, nkv, hd);
    float *scratch = malloc((size_t)(sf * threads) * sizeof *scratch);
    struct ops_pool *pool = NULL;
    if (!K || !V || !table || !q || !out || !scratch || ops_pool_create(threads, &pool) != 0) {
        fprintf(stderr, "attn_cpu: out of memory\n");
        return 1;
    }
    for (int64_t b = 0; b < nblk; b++)
        table[b] = (int32_t)b;
    enum kv_dtype dt = f32 ? KV_F32 : qt;
    struct kv_layout L = {K, V, dt, block_stride, head_stride, hd, dt};
    for (int64_t l = 0; qt != KV_F16 && l < nl; l++) {
        float *kr = malloc((size_t)(nkv * hd) * 2 * sizeof *kr);
        L.k = K + (size_t)l * layer_bytes, L.v = V + (size_t)l * layer_bytes;
        for (int64_t pos = 0; kr && pos < nblk * KV_BLOCK; pos++) {
            for (int64_t i = 0; i < nkv * hd; i++)
                kr[i] = 2 * rnd(), kr[nkv * hd + i] = rnd();
            kv_write_rows(&L, table, nkv, pos, 1, kr, kr + nkv * hd);
        }
        free(kr);
    }
    for (int64_t i = 0; qt == KV_F16 && i < nl * nblk * block_stride; i++) {
        float k = 2 * rnd(), v = rnd();
        if (f32) {
            ((float *)(void *)K)[i] = k, ((float *)(void *)V)[i] = v;
        } else {
            ((ig_f16 *)(void *)K)[i] = ig_f32_to_f16(k), ((ig_f16 *)(void *)V)[i] = ig_f32_to_f16(v);
        }
    }
    for (int64_t i = 0; i < npos * nh * hd; i++)
        q[i] = 3 * rnd();

    int64_t offs[2];
    struct attn_seq seq = {q, out, table, npos, 0};
    struct attn_params p;
    memset(&p, 0, sizeof p);
    p.kv = (struct kv_layout){K, V, dt, block_stride, head_stride, hd, dt};
    p.seqs = &seq, p.n_seqs = 1, p.item_offsets = offs;
    p.q_tok_stride = p.out_tok_stride = nh * hd;
    p.n_head = nh, p.n_head_kv = nkv, p.head_dim = hd, p.scale = 0.125f;
    p.fused = !getenv("EXACT");

    double t0 = cpu_now();
    if (!getenv("NOPREFILL"))
        attn_tiled_run(&p, pool, scratch, sf);
    double t1 = cpu_now();
    for (int r = 0; r < reps; r++)
        for (int64_t i = npos - 128; i < npos; i++) {
            struct attn_seq d = {q + i * nh * hd, out + i * nh * hd, table, 1, i};
            p.seqs = &d;
            for (int l = 0; l < nl; l++) {
                p.kv.k = K + (size_t)l * layer_bytes, p.kv.v = V + (size_t)l * layer_bytes;
                attn_tiled_run(&p, pool, scratch, sf);
            }
        }
    double t2 = cpu_now();
    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(out, sizeof *out, (size_t)(npos * nh * hd), f) != (size_t)(npos * nh * hd) ||
        fclose(f) != 0) {
        fprintf(stderr, "attn_cpu: cannot write %s\n", argv[1]);
        return 1;
    }
    printf("prefill %lld: %.1f ms/layer; decode at %lld: %.3f ms/layer-token (CPU time)\n",
           (long long)npos, (t1 - t0) * 1e3, (long long)npos,
           (t2 - t1) * 1e3 / 128 / reps / nl);
    ops_pool_free(pool);
    free(K), free(V), free(table), free(q), free(out), free(scratch);
    return 0;
}
