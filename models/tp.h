/* models/tp.h: how a model splits across tensor-parallel ranks, and one
 * rank's part of it as a model of its own.
 *
 * Megatron's split, by the split column of the table of tensors
 * (models/tensors.c): Q, K, V (and their biases), gate and up by output
 * rows, the attention output and down projections by input columns, the
 * output head and the embedding tables (token_embd, Gemma 4's per-layer
 * table) by vocabulary rows (the last rank the tables' rows past the
 * vocabulary, if any: a rank looks up the tokens of its rows, zeros for the
 * others, summed by the backend's all-reduce);
 * norms on every rank.
 * A rank holds whole query heads with the KV heads they read: KV heads are
 * split where there are at least as many as ranks (query heads follow
 * their KV head), else each KV head is replicated on the ranks that share
 * its query heads (KV heads in units whose wo columns are whole blocks of
 * its type, where there are enough). Heads, FFN columns (in whole units of
 * the down projection's type: its blocks, a float type's
 * MODEL_TP_FLOAT_UNIT) and vocabulary rows that do not divide are split as
 * evenly as they go, lower ranks taking one more; where an FFN has fewer
 * units than ranks, the last ranks hold none of it (n_ff 0, its weights
 * empty: data NULL): such a rank's FFN adds zeros to the reduce.
 *
 * A gated DeltaNet layer splits the same way by its heads: a rank's value
 * heads with the key heads they read (replicated where fewer than ranks),
 * its rows of q|k|v, z, beta and alpha, its channels of the convolution
 * (weights and state), its entries of A and dt, its columns of the output
 * projection; the gated norm's weight (one per head dim) on every rank.
 * A rank's value heads are not contiguous in the converter's tiled order,
 * so those weights are gathered copies, the part's heads again tiled
 * (model_tp_dn_head). Key heads split in units whose output projection's
 * columns are whole blocks of its type (Q4_K: two heads of 128).
 *
 * A mixture of experts splits by whole experts (the router replicated);
 * a dense FFN beside them (qwen35moe's shared expert, its one-row sigmoid
 * gate replicated; Gemma 4's MLP) by its columns as a dense FFN's. Gemma 4
 * norms the MLP's output and the experts' sum each before adding them, so
 * its backends all-reduce the two partial sums before those norms, in place
 * of the layer's FFN reduce (backend/cpu_moe.c).
 *
 * A rank's part (model_tp_shard) is a struct model whose layers have the
 * rank's heads, KV heads and FFN width and whose weights are those parts:
 * row ranges point into the mapped file (nothing else of it is read), the
 * column-split matrices are copies of the rank's columns. The forward runs
 * it unchanged; backend/tp.c adds the all-reduces and the logits' gather.
 * Covered by tests/tp/. */
#ifndef IGNITE_MODELS_TP_H
#define IGNITE_MODELS_TP_H

#include "models/model.h"

#include <stdint.h>

/* Most ranks a job may have (sizes of per-rank arrays in messages). */
#define MODEL_TP_MAX_RANKS 256

/* A float weight's column split in units of this many columns: the CUDA
 * kernels' multiple of 8 (a quantized one's are its blocks). */
#define MODEL_TP_FLOAT_UNIT 8

/* One rank's share of one layer. */
struct model_tp_layer {
    int64_t q0, n_q;   /* query heads [q0, q0 + n_q) */
    int64_t kv0, n_kv; /* the KV heads they read */
    int64_t ff0, n_ff; /* FFN columns (a mixture of experts: each expert's, all of them) */
    int64_t e0, n_e;   /* a mixture of experts: whole experts [e0, e0 + n_e) */
    int64_t mf0, n_mf; /* and the dense FFN beside them (qwen35moe's shared expert,
                          gemma4's MLP): its columns [mf0, mf0 + n_mf) */
    /* a gated DeltaNet layer: key heads [dk0, dk0 + n_dk) and of each key
     * head's group of value heads those [dg0, dg0 + n_dg) (the whole group
     * where there are at least as many key heads as ranks; else a key head
     * is replicated on the ranks that share its group); zeros elsewhere */
    int64_t dk0, n_dk;
    int64_t dg0, n_dg;
};

/* One rank's share of a model. */
struct model_tp_part {
    int rank, n_ranks;
    int64_t v0, n_v;               /* output head: vocabulary rows [v0, v0 + n_v) */
    struct model_tp_layer *layers; /* [n_layer], owned */
};

/* Rank `rank`'s share of m over n_ranks ranks. IG_OK, or IG_E_USAGE after
 * one line where m cannot split so (more ranks than KV groups' query
 * heads, wo's or a DeltaNet output's columns off its type's blocks at a
 * rank's whole heads, fewer experts than ranks), IG_E_NOMEM. Free with
 * model_tp_part_free. */
int model_tp_part(const struct model *m, int rank, int n_ranks, struct model_tp_part *out);
void model_tp_part_free(struct model_tp_part *p);

/* The whole layer's value head that value head h of share s of DeltaNet
 * layer L is (the part numbers its heads in L's order, tiled or grouped,
 * over its own key heads). */
int64_t model_tp_dn_head(const struct model_layer *L, const struct model_tp_layer *s,
                         int64_t h);

/* Rows of a table looked up by token id (token_embd, Gemma 4's per-layer
 * table) part p holds from row p->v0 on: its vocabulary rows, the last
 * rank's with any past the vocabulary. */
int64_t model_tp_table_rows(const struct model_weight *w, const struct model_tp_part *p);

/* The model of part p of m: borrows m's mapped weights (m outlives it),
 * owns its layers and column copies. IG_OK or IG_E_NOMEM. Free with
 * model_tp_shard_free (never model_free). */
int model_tp_shard(const struct model *m, const struct model_tp_part *p, struct model **out);
void model_tp_shard_free(struct model *shard);

/* The same with the column-split matrices' shapes alone (no data, nothing of
 * the file read): what a part's plan needs (`info --tp N`'s device bytes). */
int model_tp_shard_shapes(const struct model *m, const struct model_tp_part *p,
                          struct model **out);

/* Bytes of the weights a rank reads for its part: its slices of the
 * matrices, the replicated norms and biases (the embedding table's rows
 * are read by token and not counted). */
size_t model_tp_part_bytes(const struct model *m, const struct model_tp_part *p);

#endif
