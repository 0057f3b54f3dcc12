/* backend/gpu.h: the CUDA backend (backend/gpu.c, its forward in
 * backend/gpu_forward.c): weights, the KV pool and activations in device
 * memory; cuBLAS GEMMs or our quantized products, our kernels for everything
 * else (ops/gpu_ops.h, prefill/flash_attn.h,
 * decode/decode_attn.h). A step runs all its rows at once, its attention
 * reading each sequence's blocks through its block table (shares_blocks is
 * true: sequences share prefix blocks as on the CPU); a step of one row per
 * sequence is a decode step, padded to a batch-size bucket (1, 2, 4, ...)
 * whose launches are captured once as a graph and replayed for any batch of
 * that size.
 *
 * Compiled twice (devkit/dev_entry.h): gpu_*_cuda over the CUDA device layer
 * (what backend.c builds) and gpu_*_emu over the emulated one, which runs the
 * same orchestration and kernel sources on the CPU in CI
 * (tests/emu/test_backend_emu.c). Either is a struct backend: the semantics
 * are backend.h's. */
#ifndef IGNITE_BACKEND_GPU_H
#define IGNITE_BACKEND_GPU_H

#include "backend/backend.h"
#include "devkit/dev_entry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* This build's entry points as backend.c's table (backend/gpu_entry.c). */
extern const struct backend_cuda IG_DEV(gpu_entry);

/* Usable devices (0 without a driver or a device; never prints). */
int IG_DEV(gpu_device_count)(void);

/* backend_create for CUDA device o->device.index, o->n_blocks resolved.
 * Weights whose data is NULL (a synthetic model's shapes, models/synthetic.h)
 * get random values made on the device. */
int IG_DEV(gpu_backend_create)(const struct model *m, const struct backend_opts *o,
                               struct backend **out);

/* The same for a tensor-parallel rank (backend/tp.h): m is the rank's part
 * (models/tp.h), tp its share of the head (NULL: one process, as above);
 * the device is o's plus the rank's on its machine (backend/gpu_tp.c). */
struct cpu_tp;
int IG_DEV(gpu_backend_create_tp)(const struct model *m, const struct backend_opts *o,
                                  struct cpu_tp *tp, struct backend **out);

/* Every rank, after each made its backend: the all-reduce between them
 * (backend/gpu_reduce.h, IGNITE_TP_REDUCE). The same status on every rank,
 * rank 0 printing one line where it fails. */
int IG_DEV(gpu_tp_connect)(struct backend *b);

/* What backend.h does not say about a CUDA backend. */
struct gpu_backend_info {
    size_t kv_bytes;      /* device cache memory */
    size_t weight_bytes;  /* device weight memory */
    int graphs;           /* decode batch-size buckets whose step replays a graph */
    int64_t verify_steps; /* steps of 2..16 rows a sequence run by the decode kernels */
    int64_t mixed_steps;  /* prefill steps whose one-row sequences went through the decode
                             attention (IGNITE_GPU_MIXED, docs/gpu.md) */
    int64_t moe_mma_layers; /* MoE layer steps queued on the tensor-core expert products */
};
void IG_DEV(gpu_get_info)(const struct backend *b, struct gpu_backend_info *info);

/* batch --pd's cache between CUDA ranks by NCCL (backend/gpu_kv_p2p.c,
 * backend/gpu_p2p.h): no host trip, every kind of layer. Both ranks' pools
 * of the same types and layers. */
struct gpu_p2p;
/* The prefill side, in an on_layer hook of a step with layer_device: layer
 * l's whole blocks holding rows [p0, p1) of the sequence with block table
 * `table` (a window layer's: its window table under the window rule), K
 * then V a block each, to rank peer in one NCCL group on the device's
 * transfer stream, after the step's work so far (the layer's mixer); the
 * next step's writes wait for it. Returns once queued: IG_OK, or
 * IG_E_DEVICE (IG_E_NOMEM) after one line. */
int IG_DEV(gpu_kv_send_layer)(struct backend *b, struct gpu_p2p *p, int peer,
                              const int32_t *table, int64_t l, int64_t p0, int64_t p1);
/* The decode side: layer l's part received straight into the pool's
 * blocks of `table` (the counts gpu_kv_send_layer sends for the same l,
 * p0, p1), on the transfer stream, after the main stream's work so far:
 * steps see the rows only after gpu_kv_p2p_wait. Returns once queued. */
int IG_DEV(gpu_kv_recv_layer)(struct backend *b, struct gpu_p2p *p, int peer,
                              const int32_t *table, int64_t l, int64_t p0, int64_t p1);
/* The main stream's later work (steps, the blocks' next owner) after every
 * transfer queued so far: before the engine adopts received blocks, or
 * releases blocks whose receives may still be pending. The host does not
 * wait. IG_OK or IG_E_DEVICE after one line. */
int IG_DEV(gpu_kv_p2p_wait)(struct backend *b);
/* Lets queued transfers run where the host would idle or block on another
 * rank: nothing on a GPU (its streams progress on their own), the emulator
 * runs them (dev_streams_run). A transfer's failure, after one line. */
int IG_DEV(gpu_kv_p2p_progress)(struct backend *b);
/* A recurrent layer l's state in slot `slot`, whole, by NCCL on the
 * transfer stream as a layer's blocks go: sent after the step's work so
 * far (the prompt's last rows are in it; the next step's writes to the
 * slot wait for it), or received straight into the slot (the engine's
 * admission waits for it, gpu_kv_p2p_wait). */
int IG_DEV(gpu_kv_send_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                              int64_t l);
int IG_DEV(gpu_kv_recv_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                              int64_t l);

#endif
