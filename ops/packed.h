/* ops/packed.h: the packed weights: copies of a model's block-quantized
 * matrices in the 8-row interleaved layout the int8 kernels read, and of its
 * F32, F16 and BF16 ones in the float GEMM's 16-rows-a-column layout
 * (ops/qmatmul.h; the repacking is ops/qmatmul_pack.c). Made once per model
 * by whoever holds the model on the CPU (the CPU backend), and lent to each
 * run state that multiplies by it (ops_ctx_set_packed): the run state is
 * per forward, the copies are per model. Where the ISA has no packed kernel
 * for a type, its matrices are not copied and the kernels read the stored
 * rows. Covered by tests/cpu/test_qmatmul.c and tests/models/ (every matrix
 * of every architecture is packed). */
#ifndef IGNITE_OPS_PACKED_H
#define IGNITE_OPS_PACKED_H

#include "models/model.h"

#include <stdint.h>

struct ops_packed;
struct ops_pool;

/* Packs every matrix of m's table of tensors (models/tensors.h) that the
 * int8 path multiplies by: not the embedding table, whose rows are looked
 * up, unless it is the output head too (tied: packed once, as the head).
 * m NULL: an empty set, for ops_packed_add. The repacking is split over
 * pool's threads. Returns IG_OK or IG_E_NOMEM (*out NULL). */
int ops_packed_create(const struct model *m, struct ops_pool *pool, struct ops_packed **out);
void ops_packed_free(struct ops_packed *p);

/* Adds a packed copy of w when the process's ISA has a packed kernel for
 * w's type (a weight already there is kept), then gives back the pages of
 * w's stored rows where they lie in a mapped file (ig_mapped_release: read
 * again from the file should anything read them). Weights are told apart
 * by their data pointer. Returns IG_OK (also when w's type has no such
 * kernel) or IG_E_NOMEM. */
int ops_packed_add(struct ops_packed *p, const struct model_weight *w, struct ops_pool *pool);

/* The bytes of every packed copy in p (0 for NULL). */
size_t ops_packed_bytes(const struct ops_packed *p);

/* The packed copy of w (ops_qmm_packed_bytes bytes, 64-byte aligned), or
 * NULL: none, or p NULL. */
const uint8_t *ops_packed_find(const struct ops_packed *p, const struct model_weight *w);

#endif
