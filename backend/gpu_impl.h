/* backend/gpu_impl.h: what the files of the CUDA backend share (gpu.c: setup
 * and the forwards; gpu_weights.c: weights onto the device; gpu_cache.c: the
 * cache to and from the host). Private to backend/. Functions shared between
 * the files carry IG_DEV names like the public ones: the CUDA and emulated
 * builds meet in one test program. */
#ifndef IGNITE_BACKEND_GPU_IMPL_H
#define IGNITE_BACKEND_GPU_IMPL_H

#include "backend/gpu.h"
#include "device/device.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gpu_layer {
    uint16_t *wqkv;            /* [qkv_rows][n_embd] */
    uint16_t *wo;              /* [n_embd][q_dim] */
    uint16_t *wgu;             /* [2 * n_ff][n_embd]: gate rows, then up rows */
    uint16_t *wdown;           /* [n_embd][n_ff] */
    float *attn_norm, *ffn_norm;
    float *bqkv;               /* [qkv_rows] or NULL */
    uint16_t *k_cache, *v_cache; /* [n_slots][n_head_kv][n_ctx][head_dim] */
};

struct gpu_backend {
    struct backend base;       /* first: the backend.h view */
    struct dev *dev;
    struct dev_info info;
    void *stream;
    const struct model *m;
    int64_t n_ctx, max_batch;
    int n_slots;
    int64_t *n_pos;            /* [n_slots] positions cached per slot */
    int64_t q_dim, kv_dim, qkv_rows;
    struct gpu_layer *layers;
    uint16_t *tok_embd, *output;
    float *output_norm;
    double *inv_freq;
    /* activations for max_batch tokens */
    float *x, *qkv, *gu, *logits;
    uint16_t *xn, *q16, *k16, *v16, *att16, *h16;
    int32_t *tokens, *pos;     /* device: the block's ids; its first position */
    int32_t *step;             /* pinned host: token, position of a decode step */
    float *attn_work;
    int n_splits;
    struct dev_graph **graphs; /* [n_slots] each slot's decode step, once captured */
    bool no_graph;             /* capture unavailable (the emulator) or failed */
    void **allocs;             /* every device allocation, for free */
    size_t n_allocs, cap_allocs;
    size_t weight_bytes, kv_bytes, device_bytes;
    struct kv_store *host_kv;  /* the last export's host copy */
    int32_t *host_table;       /* its table: 0, 1, 2, ... */
};

/* Elements from a layer's cache to slot `slot`'s part of it. */
static inline int64_t gpu_slot_offset(const struct gpu_backend *g, int slot)
{
    return (int64_t)slot * g->m->hp.n_head_kv * g->n_ctx * g->m->hp.head_dim;
}

/* A device allocation of `bytes` into *(void **)out, remembered for
 * the backend's destroy and added to *account when not NULL. */
int IG_DEV(gpu_alloc)(struct gpu_backend *g, size_t bytes, void *out, size_t *account);

/* backend_ops.kv_export / kv_import (gpu_cache.c). */
int IG_DEV(gpu_kv_export)(struct backend *b, const struct backend_seq *seq, int64_t n_pos,
                          const struct kv_store **st, const int32_t **table);
int IG_DEV(gpu_kv_import)(struct backend *b, const struct backend_seq *seq,
                          const struct kv_store *src, int64_t n_pos);

/* Allocates and fills every weight (gpu_weights.c). */
int IG_DEV(gpu_upload_weights)(struct gpu_backend *g);

#endif
