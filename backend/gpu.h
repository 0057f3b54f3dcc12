/* backend/gpu.h: the CUDA backend (backend/gpu.c): weights, KV cache and
 * activations in device memory; cuBLAS GEMMs for prefill, our kernels for
 * everything else (ops/gpu_ops.h, prefill/flash_attn.h, decode/decode_attn.h);
 * the decode step captured once as a graph and replayed.
 *
 * Compiled twice (devkit/dev_entry.h): gpu_*_cuda over the CUDA device layer
 * (what backend.c dispatches to) and gpu_*_emu over the emulated one, which
 * runs the same orchestration and kernel sources on the CPU in CI
 * (tests/emu/test_backend_emu.c). The semantics are backend.h's. */
#ifndef IGNITE_BACKEND_GPU_H
#define IGNITE_BACKEND_GPU_H

#include "backend/backend.h"
#include "devkit/dev_entry.h"

#include <stddef.h>
#include <stdint.h>

struct gpu_backend;

struct gpu_backend_info {
    char device[32];      /* "cuda:0" */
    char name[128];       /* "NVIDIA H200" */
    size_t device_bytes;  /* device memory held: weights, cache, activations */
    size_t kv_bytes;      /* of which the KV cache */
    size_t weight_bytes;  /* of which the weights */
    int graphs;           /* 1 when the decode step replays a graph */
};

/* Usable devices (0 without a driver or a device; never prints). */
int IG_DEV(gpu_device_count)(void);

/* o->device.index picks the device. Weights whose data is NULL (a synthetic
 * model's shapes, models/synthetic.h) get random values made on the device. */
int IG_DEV(gpu_backend_create)(const struct model *m, const struct backend_opts *o,
                               struct gpu_backend **out);
void IG_DEV(gpu_backend_free)(struct gpu_backend *g);

int IG_DEV(gpu_prefill)(struct gpu_backend *g, const int32_t *tokens, int64_t n, int64_t pos0,
                        float *logits);
int IG_DEV(gpu_decode)(struct gpu_backend *g, int32_t token, int64_t pos, float *logits);

int64_t IG_DEV(gpu_n_pos)(const struct gpu_backend *g);
void IG_DEV(gpu_truncate)(struct gpu_backend *g, int64_t n_pos);
void IG_DEV(gpu_get_info)(const struct gpu_backend *g, struct gpu_backend_info *info);

/* Copies positions 0..n_pos-1 of the device cache into `kv` (host, KV_F16,
 * n_ctx >= n_pos), block by block, and sets kv->n_pos. */
int IG_DEV(gpu_kv_download)(struct gpu_backend *g, struct kv_cache *kv);
/* Replaces the device cache with kv's n_pos positions (any dtype). */
int IG_DEV(gpu_kv_upload)(struct gpu_backend *g, const struct kv_cache *kv);

#endif
