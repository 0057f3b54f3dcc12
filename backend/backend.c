/* backend/backend.c: picking the device, and the one dispatch between the
 * CPU backend (ops/ + kvcache/, in this file) and the CUDA backend
 * (backend/gpu.c, present when nvcc was found at build time).
 * Covered by tests/cli/ and tests/emu/test_backend_emu.c. */
#include "backend/backend.h"

#include "core/status.h"
#include "decode/decode.h"
#include "ops/ops.h"
#include "ops/qmatmul.h"
#include "prefill/prefill.h"

#if IGNITE_HAVE_CUDA
#include "backend/gpu.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct backend {
    enum backend_kind kind;
    const struct model *m;
    int64_t n_ctx, max_batch;
    char device[32];
    char device_name[128];
    /* CPU */
    struct ops_ctx *ops;
    struct kv_cache *kv;
    /* CUDA */
    struct gpu_backend *gpu;
    struct kv_cache *host_kv; /* the export's host copy */
};

/* ---- choosing the device --------------------------------------------------- */

int backend_parse_device(const char *spec, struct backend_device *dev)
{
    *dev = (struct backend_device){.kind = BACKEND_CPU};
    if (!strcmp(spec, "auto")) {
        dev->is_auto = true;
        return IG_OK;
    }
    if (!strcmp(spec, "cpu"))
        return IG_OK;
    if (!strncmp(spec, "cuda", 4) && (spec[4] == '\0' || spec[4] == ':')) {
        dev->kind = BACKEND_CUDA;
        if (spec[4] == '\0')
            return IG_OK;
        char *end;
        long idx = strtol(spec + 5, &end, 10);
        if (spec[5] >= '0' && spec[5] <= '9' && !*end && idx <= 1023) {
            dev->index = (int)idx;
            return IG_OK;
        }
    }
    return ig_error(IG_E_USAGE, "--device: expected auto, cpu, cuda or cuda:N, got '%s'", spec);
}

static int cuda_devices(void)
{
#if IGNITE_HAVE_CUDA
    return gpu_device_count_cuda();
#else
    return 0;
#endif
}

int backend_resolve_device(struct backend_device *dev)
{
    if (dev->is_auto) {
        dev->kind = cuda_devices() > 0 ? BACKEND_CUDA : BACKEND_CPU;
        dev->index = 0;
        dev->is_auto = false;
        return IG_OK;
    }
    if (dev->kind == BACKEND_CPU)
        return IG_OK;
#if !IGNITE_HAVE_CUDA
    return ig_error(IG_E_DEVICE, "--device cuda:%d: this ignite was built without CUDA (nvcc "
                    "was not found at build time); use --device cpu", dev->index);
#else
    int n = cuda_devices();
    if (n == 0)
        return ig_error(IG_E_DEVICE, "--device cuda:%d: no usable CUDA device (no GPU or no "
                        "driver); use --device cpu", dev->index);
    if (dev->index >= n)
        return ig_error(IG_E_DEVICE, "--device cuda:%d: there %s only %d CUDA device%s (0..%d)",
                        dev->index, n == 1 ? "is" : "are", n, n == 1 ? "" : "s", n - 1);
    return IG_OK;
#endif
}

/* ---- lifetime ----------------------------------------------------------------- */

static int create_cpu(struct backend *b, const struct backend_opts *o)
{
    int st = kv_cache_create(&b->m->hp, o->n_ctx, o->kv_dtype, o->oom_hint, &b->kv);
    if (st == IG_OK)
        st = ops_ctx_create(b->m, o->n_threads, o->max_batch, &b->ops);
    if (st == IG_OK && o->exact) /* else the context's default (IGNITE_MATMUL) */
        ops_ctx_set_exact(b->ops, true);
    snprintf(b->device, sizeof b->device, "cpu");
    snprintf(b->device_name, sizeof b->device_name, "cpu (%s)",
             ops_qmm_isa_name(ops_qmm_best_isa()));
    return st;
}

static int create_cuda(struct backend *b, const struct backend_opts *o)
{
#if IGNITE_HAVE_CUDA
    int st = gpu_backend_create_cuda(b->m, o, &b->gpu);
    if (st != IG_OK)
        return st;
    struct gpu_backend_info info;
    gpu_get_info_cuda(b->gpu, &info);
    snprintf(b->device, sizeof b->device, "%s", info.device);
    snprintf(b->device_name, sizeof b->device_name, "%s", info.name);
    return IG_OK;
#else
    (void)b;
    (void)o;
    return ig_error(IG_E_DEVICE, "this ignite was built without CUDA");
#endif
}

int backend_create(const struct model *m, const struct backend_opts *o, struct backend **out)
{
    *out = NULL;
    IG_ASSERT(o->n_ctx >= 1 && o->max_batch >= 1 && !o->device.is_auto);
    struct backend *b = calloc(1, sizeof *b);
    if (!b)
        return ig_error(IG_E_NOMEM, "out of memory");
    *b = (struct backend){.kind = o->device.kind, .m = m, .n_ctx = o->n_ctx,
                          .max_batch = o->max_batch};
    int st = b->kind == BACKEND_CUDA ? create_cuda(b, o) : create_cpu(b, o);
    if (st != IG_OK) {
        backend_free(b);
        return st;
    }
    *out = b;
    return IG_OK;
}

void backend_free(struct backend *b)
{
    if (!b)
        return;
#if IGNITE_HAVE_CUDA
    gpu_backend_free_cuda(b->gpu);
#endif
    ops_ctx_free(b->ops);
    kv_cache_free(b->kv);
    kv_cache_free(b->host_kv);
    free(b);
}

/* ---- the forwards ------------------------------------------------------------------ */

int backend_prefill(struct backend *b, const int32_t *tokens, int64_t n, int64_t pos0,
                    float *logits)
{
#if IGNITE_HAVE_CUDA
    if (b->gpu)
        return gpu_prefill_cuda(b->gpu, tokens, n, pos0, logits);
#endif
    return prefill_forward(b->ops, b->kv, tokens, n, pos0, logits);
}

int backend_decode(struct backend *b, int32_t token, int64_t pos, float *logits)
{
#if IGNITE_HAVE_CUDA
    if (b->gpu)
        return gpu_decode_cuda(b->gpu, token, pos, logits);
#endif
    return decode_forward(b->ops, b->kv, token, pos, logits);
}

void backend_truncate(struct backend *b, int64_t n_pos)
{
    IG_ASSERT(n_pos >= 0 && n_pos <= backend_n_pos(b));
#if IGNITE_HAVE_CUDA
    if (b->gpu) {
        gpu_truncate_cuda(b->gpu, n_pos);
        return;
    }
#endif
    b->kv->n_pos = n_pos;
}

/* ---- what it is ------------------------------------------------------------------ */

enum backend_kind backend_kind_of(const struct backend *b) { return b->kind; }
int64_t backend_n_ctx(const struct backend *b) { return b->n_ctx; }
int64_t backend_max_batch(const struct backend *b) { return b->max_batch; }
const char *backend_device(const struct backend *b) { return b->device; }
const char *backend_device_name(const struct backend *b) { return b->device_name; }

int64_t backend_n_pos(const struct backend *b)
{
#if IGNITE_HAVE_CUDA
    if (b->gpu)
        return gpu_n_pos_cuda(b->gpu);
#endif
    return b->kv->n_pos;
}

int backend_threads(const struct backend *b)
{
    return b->ops ? ops_ctx_threads(b->ops) : 1;
}

size_t backend_kv_bytes(const struct backend *b)
{
#if IGNITE_HAVE_CUDA
    if (b->gpu) {
        struct gpu_backend_info info;
        gpu_get_info_cuda(b->gpu, &info);
        return info.kv_bytes;
    }
#endif
    return kv_cache_bytes(b->kv);
}

double backend_kv_max_bytes(const struct backend *b)
{
    return kv_cache_bytes_for(&b->m->hp, b->n_ctx, b->kv ? b->kv->dtype : KV_F16);
}

size_t backend_device_bytes(const struct backend *b)
{
#if IGNITE_HAVE_CUDA
    if (b->gpu) {
        struct gpu_backend_info info;
        gpu_get_info_cuda(b->gpu, &info);
        return info.device_bytes;
    }
#endif
    (void)b;
    return 0;
}

size_t backend_weight_bytes(const struct backend *b)
{
#if IGNITE_HAVE_CUDA
    if (b->gpu) {
        struct gpu_backend_info info;
        gpu_get_info_cuda(b->gpu, &info);
        return info.weight_bytes;
    }
#endif
    (void)b;
    return 0;
}

/* ---- moving the cache ------------------------------------------------------------- */

int backend_kv_export(struct backend *b, const struct kv_cache **out)
{
    *out = NULL;
    if (b->kv) {
        *out = b->kv;
        return IG_OK;
    }
#if IGNITE_HAVE_CUDA
    kv_cache_free(b->host_kv);
    b->host_kv = NULL;
    int st = kv_cache_create(&b->m->hp, b->n_ctx, KV_F16, NULL, &b->host_kv);
    if (st == IG_OK)
        st = gpu_kv_download_cuda(b->gpu, b->host_kv);
    if (st == IG_OK)
        *out = b->host_kv;
    return st;
#else
    return ig_error(IG_E_INTERNAL, "backend without a cache");
#endif
}

/* Copies kv's positions into the CPU cache `dst` (same shape), converting
 * the element type where they differ. */
static int copy_cache(struct kv_cache *dst, const struct kv_cache *src)
{
    int st = kv_cache_reserve(dst, src->n_pos);
    if (st != IG_OK)
        return st;
    int64_t w = src->n_head_kv * src->head_dim;
    float *k = malloc((size_t)w * sizeof *k), *v = malloc((size_t)w * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return ig_error(IG_E_NOMEM, "out of memory copying the KV cache");
    }
    for (int64_t l = 0; l < src->n_layer; l++)
        for (int64_t p = 0; p < src->n_pos; p++) {
            for (int64_t h = 0; h < src->n_head_kv; h++) {
                const void *ks = kv_cache_rows(src, kv_cache_k_table(src, l), h, p);
                const void *vs = kv_cache_rows(src, kv_cache_v_table(src, l), h, p);
                kv_row_to_f32(src->dtype, ks, src->head_dim, k + h * src->head_dim);
                kv_row_to_f32(src->dtype, vs, src->head_dim, v + h * src->head_dim);
            }
            kv_cache_write(dst, l, p, 1, k, v);
        }
    free(k);
    free(v);
    dst->n_pos = src->n_pos;
    return IG_OK;
}

int backend_kv_import(struct backend *b, const struct kv_cache *kv)
{
    IG_ASSERT(kv->n_pos <= b->n_ctx);
#if IGNITE_HAVE_CUDA
    if (b->gpu)
        return gpu_kv_upload_cuda(b->gpu, kv);
#endif
    return copy_cache(b->kv, kv);
}
