/* backend/tp.h: tensor parallelism: one model across the ranks of an MPI
 * job (core/coll.h), Megatron's split (models/tp.h), each rank on the CPU or
 * on its GPU (backend/gpu_tp.c).
 *
 * Rank 0 runs the command (reads input, tokenizes, schedules, writes
 * output) with a backend like any other (backend_tp_create, through
 * backend_create when the job has several ranks); each step's rows, and the
 * cache's moves to and from files, are broadcast to the other ranks, which
 * run nothing but backend_tp_follow: the same step on their part of the
 * weights, an all-reduce after each attention and each FFN, the logits
 * gathered on rank 0. A rank that cannot set up its part (a bad file, out
 * of memory) is named by rank 0 in one line and every rank returns that
 * status; a rank that dies ends the job (mpirun). Covered by tests/tp/. */
#ifndef IGNITE_BACKEND_TP_H
#define IGNITE_BACKEND_TP_H

#include "backend/backend.h"

/* backend_create on rank 0 of a job of several ranks: the ranks' parts of m
 * and a backend of each on o's device (CUDA: each rank's own GPU). IG_OK, or the status of the
 * rank that failed after one line naming it. */
int backend_tp_create(const struct model *m, const struct backend_opts *o, struct backend **out);

/* True where backend_create should make a tensor-parallel backend: a job of
 * several ranks, rank 0, none made yet (a second model, such as a draft
 * model, runs on rank 0 alone). */
bool backend_tp_wanted(void);

/* The loop of every rank but 0: follows rank 0's backends until rank 0
 * ends (backend_tp_end). Returns IG_OK, or a status where this rank could
 * not go on. */
int backend_tp_follow(void);

/* On rank 0, at the end of the command: lets the other ranks go. */
void backend_tp_end(void);

/* The job's ranks are not tensor-parallel (batch --pd: prefill and decode
 * ranks, cli/pd.c): backend_tp_wanted is false, backend_tp_end does
 * nothing. */
void backend_tp_off(void);

/* `--tp N` as the user gave it (0: not given), for `info --tp N` and the
 * checks at start. */
void backend_tp_set_asked(int n);
int backend_tp_asked(void);

#endif
