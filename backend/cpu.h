/* backend/cpu.h: the CPU backend's constructor (backend/cpu.c); everything
 * else is reached through backend.h. */
#ifndef IGNITE_BACKEND_CPU_H
#define IGNITE_BACKEND_CPU_H

#include "backend/backend.h"

/* backend_create for the CPU, with o->n_blocks resolved. */
int backend_cpu_create(const struct model *m, const struct backend_opts *o, struct backend **out);

struct cpu_tp;

/* backend_cpu_create for a tensor-parallel rank (backend/tp.c): m is the
 * rank's part (models/tp.h), tp (borrowed, outlives the backend) its side
 * of the all-reduces and the logits' gather. */
int backend_cpu_create_tp(const struct model *m, const struct backend_opts *o, struct cpu_tp *tp,
                          struct backend **out);

/* The bytes of b's packed weight copies (ops/packed.h): a CPU backend's
 * (backend_cpu_create*), 0 for IGNITE_MATMUL=exact. For the tensor-parallel
 * ranks' accounting (IGNITE_TP_STATS). */
size_t backend_cpu_packed_bytes(const struct backend *b);

#endif
