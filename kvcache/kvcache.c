/* kvcache/kvcache.c: the paged host cache kvcache.h describes: block tables,
 * growth a block at a time, the up-front memory check, and the one function
 * that stores new positions. Attention reads the blocks directly
 * (prefill/attn_tiled.c, decode/decode.c); the file format is kvfile.c.
 * Covered by tests/kvcache/test_kvcache.c and tests/cpu/. */
#include "kvcache/kvcache.h"

#include "core/half.h"
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t kv_dtype_bytes(enum kv_dtype dtype)
{
    return dtype == KV_F16 ? 2 : 4;
}

/* Bytes of one block's K (or V) for one layer. */
static size_t layer_block_bytes(const struct kv_cache *kv)
{
    return (size_t)(kv->n_head_kv * KV_BLOCK * kv->head_dim) * kv_dtype_bytes(kv->dtype);
}

double kv_cache_bytes_for(const struct model_hparams *hp, int64_t n_ctx, enum kv_dtype dtype)
{
    double blocks = (double)((n_ctx + KV_BLOCK - 1) / KV_BLOCK);
    return blocks * KV_BLOCK * 2.0 * (double)hp->n_layer * (double)hp->n_head_kv *
           (double)hp->head_dim * (double)kv_dtype_bytes(dtype);
}

double kv_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                fclose(f);
                return (double)kib * 1024.0;
            }
        fclose(f);
    }
#ifdef _SC_AVPHYS_PAGES
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        return (double)pages * (double)page;
#endif
    return 0;
}

int kv_cache_create(const struct model_hparams *hp, int64_t n_ctx, enum kv_dtype dtype,
                    const char *hint, struct kv_cache **out)
{
    *out = NULL;
    if (n_ctx < 1 || hp->n_layer < 1 || hp->n_head_kv < 1 || hp->head_dim < 1)
        return ig_error(IG_E_INTERNAL, "KV cache: bad shape (n_ctx %lld, %lld layers)",
                        (long long)n_ctx, (long long)hp->n_layer);
    double need = kv_cache_bytes_for(hp, n_ctx, dtype), avail = kv_mem_available();
    if (need > (double)(SIZE_MAX / 4) || (avail > 0 && need > avail))
        return ig_error(IG_E_NOMEM,
                        "a context of %lld positions needs %.1f MiB of KV cache but %.1f MiB "
                        "of memory is available (%s)", (long long)n_ctx, need / 1048576.0,
                        avail / 1048576.0, hint ? hint : "lower -c/--ctx-size");

    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return ig_error(IG_E_NOMEM, "out of memory allocating the KV cache");
    kv->dtype = dtype;
    kv->n_layer = hp->n_layer;
    kv->n_head_kv = hp->n_head_kv;
    kv->head_dim = hp->head_dim;
    kv->n_ctx = n_ctx;
    kv->max_blocks = (n_ctx + KV_BLOCK - 1) / KV_BLOCK;
    kv->k_blocks = calloc((size_t)(kv->n_layer * kv->max_blocks), sizeof *kv->k_blocks);
    kv->v_blocks = calloc((size_t)(kv->n_layer * kv->max_blocks), sizeof *kv->v_blocks);
    kv->mem = calloc((size_t)kv->max_blocks, sizeof *kv->mem);
    if (!kv->k_blocks || !kv->v_blocks || !kv->mem) {
        kv_cache_free(kv);
        return ig_error(IG_E_NOMEM, "out of memory allocating the KV block tables");
    }
    *out = kv;
    return IG_OK;
}

void kv_cache_free(struct kv_cache *kv)
{
    if (!kv)
        return;
    if (kv->mem)
        for (int64_t b = 0; b < kv->n_blocks; b++)
            free(kv->mem[b]);
    free(kv->mem);
    free(kv->v_blocks);
    free(kv->k_blocks);
    free(kv);
}

int kv_cache_reserve(struct kv_cache *kv, int64_t n_pos)
{
    IG_ASSERT(n_pos >= 0 && n_pos <= kv->n_ctx);
    size_t lb = layer_block_bytes(kv);
    while (kv->n_blocks * KV_BLOCK < n_pos) {
        int64_t b = kv->n_blocks;
        char *mem = malloc(lb * 2 * (size_t)kv->n_layer);
        if (!mem)
            return ig_error(IG_E_NOMEM, "out of memory growing the KV cache to %lld positions "
                            "(%.1f MiB held)", (long long)((b + 1) * KV_BLOCK),
                            (double)kv_cache_bytes(kv) / 1048576.0);
        kv->mem[b] = mem;
        for (int64_t l = 0; l < kv->n_layer; l++) {
            kv->k_blocks[l * kv->max_blocks + b] = mem + (size_t)(2 * l) * lb;
            kv->v_blocks[l * kv->max_blocks + b] = mem + (size_t)(2 * l + 1) * lb;
        }
        kv->n_blocks = b + 1;
    }
    return IG_OK;
}

size_t kv_cache_bytes(const struct kv_cache *kv)
{
    return layer_block_bytes(kv) * 2 * (size_t)kv->n_layer * (size_t)kv->n_blocks;
}

/* One [head_dim] vector into the cache at `dst`. */
static void store(const struct kv_cache *kv, void *dst, const float *src)
{
    if (kv->dtype == KV_F32) {
        memcpy(dst, src, (size_t)kv->head_dim * sizeof(float));
    } else {
        ig_f16 *d = dst;
        for (int64_t i = 0; i < kv->head_dim; i++)
            d[i] = ig_f32_to_f16(src[i]);
    }
}

void kv_cache_write(struct kv_cache *kv, int64_t layer, int64_t pos0, int64_t n_tokens,
                    const float *k, const float *v)
{
    IG_ASSERT(layer >= 0 && layer < kv->n_layer);
    IG_ASSERT(pos0 >= 0 && n_tokens >= 0 && pos0 + n_tokens <= kv->n_blocks * KV_BLOCK);
    int64_t kv_dim = kv->n_head_kv * kv->head_dim;
    void *const *kt = kv_cache_k_table(kv, layer), *const *vt = kv_cache_v_table(kv, layer);
    for (int64_t h = 0; h < kv->n_head_kv; h++)
        for (int64_t t = 0; t < n_tokens; t++) {
            store(kv, kv_cache_rows(kv, kt, h, pos0 + t), k + t * kv_dim + h * kv->head_dim);
            store(kv, kv_cache_rows(kv, vt, h, pos0 + t), v + t * kv_dim + h * kv->head_dim);
        }
}

void kv_row_to_f32(enum kv_dtype dtype, const void *src, int64_t n, float *dst)
{
    if (dtype == KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    }
    const ig_f16 *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = ig_f16_to_f32(h[i]);
}
