/* backend/gpu.h: the CUDA backend (backend/gpu.c): weights, KV cache and
 * activations in device memory; cuBLAS GEMMs for prefill, our kernels for
 * everything else (ops/gpu_ops.h, prefill/flash_attn.h, decode/decode_attn.h);
 * each slot's decode step captured once as a graph and replayed.
 *
 * Until its attention kernels read the pool's block tables, the backend keeps
 * one contiguous cache of n_ctx positions per slot and runs a step one
 * sequence at a time (shares_blocks is false: no prefix sharing), returning
 * the logits of a sequence's last row only.
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

#include <stddef.h>
#include <stdint.h>

/* Usable devices (0 without a driver or a device; never prints). */
int IG_DEV(gpu_device_count)(void);

/* backend_create for CUDA device o->device.index, o->n_blocks resolved.
 * Weights whose data is NULL (a synthetic model's shapes, models/synthetic.h)
 * get random values made on the device. */
int IG_DEV(gpu_backend_create)(const struct model *m, const struct backend_opts *o,
                               struct backend **out);

/* What backend.h does not say about a CUDA backend. */
struct gpu_backend_info {
    size_t kv_bytes;      /* device cache memory */
    size_t weight_bytes;  /* device weight memory */
    int graphs;           /* slots whose decode step replays a graph */
};
void IG_DEV(gpu_get_info)(const struct backend *b, struct gpu_backend_info *info);

#endif
