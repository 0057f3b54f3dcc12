/* backend/backend.h: where the forward pass runs, chosen once per run.
 *
 * A backend owns the run state and the KV cache of one sequence and does the
 * two forwards generation needs: a prefill of a block of prompt tokens and a
 * one-token decode step, each returning the logits of its last token (host
 * memory, f32). The CPU backend wraps ops/ + kvcache/ (prefill_forward,
 * decode_forward); the CUDA backend (backend/gpu.c) keeps weights, cache and
 * activations on the device. generate_run and `ignite bench` see only this.
 * Covered by tests/cli/ (CPU), tests/emu/test_backend_emu.c (the CUDA
 * backend under the emulator) and tests/gpu/. */
#ifndef IGNITE_BACKEND_BACKEND_H
#define IGNITE_BACKEND_BACKEND_H

#include "kvcache/kvcache.h"
#include "models/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum backend_kind { BACKEND_CPU, BACKEND_CUDA };

/* --device as the user wrote it. */
struct backend_device {
    enum backend_kind kind;
    int index;   /* cuda:N, 0 by default */
    bool is_auto;/* "auto": CUDA when a device is usable, else CPU */
};

/* Parses auto | cpu | cuda | cuda:N. IG_E_USAGE (one line) otherwise. */
int backend_parse_device(const char *spec, struct backend_device *dev);

/* Resolves "auto" (and checks an explicit cuda:N): the kind and index the run
 * will use; is_auto is false after it. IG_E_DEVICE, naming why, for a CUDA device asked for that this
 * build or this machine cannot give. */
int backend_resolve_device(struct backend_device *dev);

/* --gpu-weights: how the CUDA backend holds the weights. NATIVE keeps the
 * quantized types the kernels read (ops/gpu_qmm.h) in their blocks and
 * converts the others to f16; F16 converts every weight (3-4x the bytes of
 * a 4-bit file, the path before the quantized kernels). */
enum backend_gpu_weights { BACKEND_GPU_NATIVE, BACKEND_GPU_F16 };

/* Parses native | f16; IG_E_USAGE (one line) otherwise. */
int backend_parse_gpu_weights(const char *spec, enum backend_gpu_weights *out);
const char *backend_gpu_weights_name(enum backend_gpu_weights mode);

/* Device bytes the CUDA backend's weights of m take in `mode` (computed on
 * the host, in every build: backend/gpu_plan.c). */
size_t backend_gpu_weight_bytes(const struct model *m, enum backend_gpu_weights mode);
/* Of them, what one decode step reads: all but an untied embedding table,
 * of which it reads one row (the bandwidth figures of `ignite bench`). */
size_t backend_gpu_step_bytes(const struct model *m, enum backend_gpu_weights mode);

struct backend_opts {
    struct backend_device device;
    int n_threads;        /* CPU threads (<= 0: one per core); CUDA ignores it */
    int64_t n_ctx;        /* positions the cache may hold */
    int64_t max_batch;    /* most tokens per prefill call */
    enum kv_dtype kv_dtype; /* CPU cache element type (the CUDA cache is f16) */
    bool exact;           /* CPU: f32 matmuls instead of the int8 fast path (else
                           * IGNITE_MATMUL decides, see ops/qmatmul.h) */
    enum backend_gpu_weights gpu_weights; /* CUDA: native (the default) or f16 */
    const char *oom_hint; /* what the user can do when n_ctx or max_batch does not fit,
                           * ending the out-of-memory line; NULL: run's options (-c, --chunk) */
};

struct backend;

/* Builds the backend for model m (borrowed; outlives the backend): uploads
 * weights for CUDA. Returns IG_OK, or IG_E_NOMEM (with the bytes needed and
 * free), IG_E_DEVICE or another status after one line on stderr. */
int backend_create(const struct model *m, const struct backend_opts *o, struct backend **out);
void backend_free(struct backend *b);

/* Tokens [0, n) at positions pos0.. (pos0 <= n_pos; the cache must hold
 * 0..pos0-1), n <= max_batch, pos0 + n <= n_ctx: extends the cache, sets
 * n_pos = pos0 + n, writes logits[0..n_vocab) of the last token. Returns
 * IG_OK, IG_E_INPUT (a token id out of range, past the context), IG_E_NOMEM
 * or IG_E_DEVICE. */
int backend_prefill(struct backend *b, const int32_t *tokens, int64_t n, int64_t pos0,
                    float *logits);

/* One token at position pos == n_pos < n_ctx; logits as prefill. */
int backend_decode(struct backend *b, int32_t token, int64_t pos, float *logits);

/* Forgets positions n_pos.. (n_pos <= backend_n_pos): benchmarks rerun a
 * test over the same positions. */
void backend_truncate(struct backend *b, int64_t n_pos);

enum backend_kind backend_kind_of(const struct backend *b);
int64_t backend_n_pos(const struct backend *b);
int64_t backend_n_ctx(const struct backend *b);
int64_t backend_max_batch(const struct backend *b);
int backend_threads(const struct backend *b);
/* "cpu", or "cuda:0" with the device's name in device_name(). */
const char *backend_device(const struct backend *b);
const char *backend_device_name(const struct backend *b);
/* Cache bytes held now, and what n_ctx positions need. */
size_t backend_kv_bytes(const struct backend *b);
double backend_kv_max_bytes(const struct backend *b);
/* Device memory the backend holds (0 for the CPU), and of it the weights. */
size_t backend_device_bytes(const struct backend *b);
size_t backend_weight_bytes(const struct backend *b);

/* The cache as a host kv_cache of n_pos positions, for --save-kv: the CPU
 * backend's own, or a host copy of the device cache (f16), owned by the
 * backend until the next call. */
int backend_kv_export(struct backend *b, const struct kv_cache **out);

/* Replaces the cache with the n_pos positions of `kv` (--load-kv), converting
 * to the backend's cache type. kv->n_pos <= n_ctx. */
int backend_kv_import(struct backend *b, const struct kv_cache *kv);

#endif
