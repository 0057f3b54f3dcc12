/* backend/gpu_plan.h: what the CUDA backend puts on the device for a model,
 * computed on the host (backend/gpu_plan.c, in every build, so `ignite
 * info` can say it without a GPU): the device type of each weight, how the
 * fused matrices (Q|K|V, gate|up) split into parts of one type, the bytes
 * of the weights and of the matmul scratch. The upload (gpu_weights.c),
 * the memory check (gpu.c) and the report all read this one plan.
 * Private to backend/. Covered by tests/unit/test_gpu_plan.c and
 * tests/emu/test_backend_qemu.c. */
#ifndef IGNITE_BACKEND_GPU_PLAN_H
#define IGNITE_BACKEND_GPU_PLAN_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most parts a fused matrix has (one per weight: Q, K, V), and the
 * most weights a fused group has. */
#define GPU_PLAN_MAX_PARTS 3

/* A run of consecutive weights of a fused matrix with one device type. */
struct gpu_plan_part {
    int type;      /* enum quant_type on the device: a block type or QUANT_F16 */
    int64_t rows;  /* the weights' rows together */
    int first, count; /* weights [first, first + count) of the list */
};

/* IG_OK where the CUDA backend runs every layer kind and feature of m,
 * else IG_E_MODEL after one line naming what it does not run yet
 * (backend_gpu_missing); in every build, so the refusal is tested without a
 * GPU. The CUDA backend's check_model asks it first. */
int gpu_plan_check_model(const struct model *m);

/* The device type of w: its own where the device layout and kernels take it
 * and the mode is native, else f16 (ops/gpu_qmm.h, gk_qmm_native; for an
 * expert weight, n_expert > 1, gk_qmm_native_experts: MXFP4 too). */
int gpu_plan_type(const struct model_weight *w, enum backend_gpu_weights mode);

/* Whether weight t goes to the device as an f32 [rows * cols] vector, not
 * a matrix of parts: a mixture of experts' router (backend/gpu_moe.c reads
 * it in f32, as the CPU's exact router: an f16 one flips near choices). */
bool gpu_plan_f32_matrix(const struct model_tensor *t);

/* Splits the n weights ws (same cols, rows stacked in order: an expert
 * weight's n_expert matrices one after the other) into parts;
 * returns their number (1..n). */
int gpu_plan_parts(const struct model_weight *const *ws, int n, enum backend_gpu_weights mode,
                   struct gpu_plan_part parts[GPU_PLAN_MAX_PARTS]);

/* The weights that share the device buffer of the walk's weight `at`
 * (models/tensors.h): its fused group's (rows of one fuse and kind, in
 * table order; those the model lacks left out) when `at` is the group's
 * first, `at` alone when it joins none. Returns their number, or 0 when
 * `at` is a later member of a group (the first one's buffer holds it). */
int gpu_plan_group(const struct model_tensor_it *at,
                   struct model_tensor_it group[GPU_PLAN_MAX_PARTS]);

/* Bytes of the f16 scratch the matmul dispatch needs for up to max_n
 * activation rows (gk_qmm_choose's plans of every part). */
size_t gpu_plan_scratch_bytes(const struct model *m, enum backend_gpu_weights mode,
                              int64_t max_n);

#endif
