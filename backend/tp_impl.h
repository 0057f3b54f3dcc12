/* backend/tp_impl.h: what the tensor-parallel backend's files share
 * (private to backend/): the commands rank 0 broadcasts, a rank's part, and
 * the calls between the files: tp.c (rank 0's backend), tp_follow.c (the
 * other ranks' loop), tp_rank.c (a rank's part and its set-up), tp_kv.c (a
 * sequence's cache between the ranks). Covered by tests/tp/. */
#ifndef IGNITE_BACKEND_TP_IMPL_H
#define IGNITE_BACKEND_TP_IMPL_H

#include "backend/cpu_layer.h"
#include "backend/tp.h"
#include "models/tp.h"
#include "core/mapped_file.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- what rank 0 broadcasts -------------------------------------------------- */

enum tp_cmd { TP_SETUP = 1, TP_STEP, TP_EXPORT, TP_IMPORT, TP_DESTROY, TP_END };

/* int64 fields a sequence has in a TP_STEP message: slot, row0, n_rows, pos0,
 * prompt, table length (tp.c packs them, tp_follow.c reads them). */
#define TP_SEQ_FIELDS 6

/* A command's header; its payload, where it has one, follows in a second
 * broadcast of v[0] bytes. */
struct tp_msg {
    int64_t cmd;
    int64_t v[6];
};

/* TP_SETUP's payload: what a rank needs to build its part. */
struct tp_setup {
    char path[4096];            /* the model (IGNITE_TP_MODEL overrides it on a rank) */
    size_t file_bytes;          /* the model rank 0 loaded, to check a rank's against */
    int64_t n_tensors;
    struct backend_opts o;      /* oom_hint NULL */
};

/* Tags of point-to-point messages (core/coll.h). */
#define TAG_KV 2

/* What every rank holds while a tensor-parallel backend lives. */
struct tp_rank {
    struct model_tp_part *parts; /* [n_ranks] every rank's share (the cache's heads) */
    const struct model *m;       /* the whole model (its layers' shapes: the cache's heads) */
    struct model *shard;         /* this rank's part as a model */
    struct cpu_tp tp;
    struct backend *cpu;         /* the backend over shard: the CPU's, or the GPU's
                                    (backend/gpu_tp.c) */
    struct kv_memory *part_mem;  /* shard's memory at a file's dtypes (import) */
    struct kv_store *staging;    /* the cache on its way to or from a file */
    int32_t *ids;                /* identity block table of staging */
    char *buf;                   /* messages */
    size_t buf_cap;
    int64_t steps;               /* steps run (IGNITE_TP_STATS) */
    const struct ig_mapped_file *map; /* the model file the part points into, or NULL */
    const void *ple_at;          /* the whole model's per-layer table (Gemma 4; else */
    size_t ple_bytes;            /* NULL, 0): its pages this rank has (IGNITE_TP_STATS) */
    bool packed;                 /* cpu is the CPU's backend (its packed copies count) */
};

/* r->buf holds at least `bytes`. IG_OK or IG_E_NOMEM (one line). */
int tp_grow(struct tp_rank *r, size_t bytes);

/* Frees a rank's part (NULL is fine). */
void tp_rank_free(struct tp_rank *r);

/* Every rank: its part of m and its CPU backend (where st_before is IG_OK;
 * else this rank failed before, msg_before saying why), then the agreement:
 * IG_OK on every rank, or on every rank the failing rank's status, rank 0
 * printing one line naming it. *out is NULL unless all went well. */
int tp_setup_agreed(const struct model *m, const struct backend_opts *o, int st_before,
                    const char *msg_before, struct tp_rank **out);

/* Every rank, at a backend's end: its steps, seconds in collectives and
 * resident memory to rank 0, which prints them where IGNITE_TP_STATS is set. */
void tp_stats(struct tp_rank *r);

/* A staging store of nb blocks of mem in r (the previous one freed), with
 * r->ids its identity table. */
int tp_staging(struct tp_rank *r, const struct kv_memory *mem, int64_t nb);

/* Every rank: the KV heads it is first to hold of the sequence to rank 0,
 * into `full` there (a whole-model store of nb blocks, table r->ids). */
int tp_export_heads(struct tp_rank *r, const struct backend_seq *seq, int64_t n_pos,
                    struct kv_store *full);

/* Every rank: its heads of rank 0's whole-model store `src` (blocks 0..),
 * of dtypes dk, dv, into its cache at seq. */
int tp_import_heads(struct tp_rank *r, const struct backend_seq *seq, int64_t n_pos,
                    const struct kv_store *src, enum kv_dtype dk, enum kv_dtype dv);

#endif
