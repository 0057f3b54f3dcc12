/* backend/backend.h: where a step of the forward pass runs, chosen once per
 * run.
 *
 * A step is a batch of rows: each row is a token of some sequence at some
 * position, and the rows of one sequence are consecutive and in position
 * order (a prompt chunk, or the one token a decoding sequence feeds back).
 * The backend runs every row through the model at once (each weight read
 * once per step), stores each row's K/V in its sequence's blocks of the KV
 * pool (kvcache.h: the engine hands out the blocks, the backend owns the
 * memory they live in) and returns the logits of the rows that want them.
 * Attention lets a row see its own sequence's positions up to its own, so a
 * row's result does not depend on the other rows of the step.
 *
 * A backend is a small table of functions (struct backend_ops): the CPU in
 * backend/cpu.c (ops/ + prefill/attn_tiled.c over a host kv_store), CUDA in
 * backend/gpu.c (the pool in device memory, the same blocks and tables).
 * generate/ and `ignite bench` see only this header. Covered by tests/cpu/,
 * tests/cli/, tests/emu/test_backend_emu.c and test_backend_batch_emu.c (the
 * CUDA backend under the emulator) and tests/gpu/. */
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

/* The rows of a step of many sequences (`ignite batch`, `bench --requests`)
 * when -b gives none: 512 on the CPU, where a step's time grows with its rows
 * and decode rows wait for the prompt rows beside them; 2048 on CUDA, where a
 * step of 512 rows with 256 sequences decoding left their prompts as few as
 * 256 rows (on an H200, -P 256: 8.1x one sequence's decode at 512 rows, 14.1x
 * at 2048; docs/benchmarks.md). */
int64_t backend_batch_rows_default(enum backend_kind kind);

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
/* What the CUDA backend does not run yet of m (a layer kind or a feature,
 * in words; *layer the first such layer where it is one layer's, else -1),
 * or NULL where it runs m. In every build: info says it, the backend
 * refuses with it (gpu_plan_check_model). */
const char *backend_gpu_missing(const struct model *m, int64_t *layer);
/* Of them, what one decode step reads: all but an untied embedding table,
 * of which it reads one row (the bandwidth figures of `ignite bench`). */
size_t backend_gpu_step_bytes(const struct model *m, enum backend_gpu_weights mode);
/* Of them, the mixture of experts' expert weights (gate, up, down and their
 * biases: those with an expert dimension; 0 without experts): a
 * tensor-parallel rank's part (info --tp N --json). */
size_t backend_gpu_expert_bytes(const struct model *m, enum backend_gpu_weights mode);

struct backend_opts {
    struct backend_device device;
    int n_threads;        /* CPU threads (<= 0: one per core); CUDA ignores it */
    int64_t n_ctx;        /* positions one sequence may hold */
    int64_t max_rows;     /* most rows in a step (the token budget, --chunk) */
    int n_slots;          /* sequences in flight at most (>= 1) */
    int64_t n_blocks;     /* blocks of the KV pool; 0: n_slots full contexts */
    enum kv_dtype kv_dtype; /* CPU pool's K element type (the CUDA pool is f16; a
                             * quantized type there is refused, one line) */
    enum kv_dtype kv_dtype_v; /* and its V element type */
    bool exact;           /* CPU: f32 matmuls instead of the int8 fast path (else
                           * IGNITE_MATMUL decides, see ops/qmatmul.h) */
    enum backend_gpu_weights gpu_weights; /* CUDA: native (the default) or f16 */
    const char *oom_hint; /* what the user can do when the cache or the rows do not fit,
                           * ending the out-of-memory line; NULL: run's options (-c, --chunk) */
    bool free_window_blocks; /* the window rule (kvcache.h): the sliding-window layers'
                              * blocks in a side of their own, a sequence holding only
                              * what its window reaches; the CPU and CUDA backends in
                              * one process take it (backend_window_blocks),
                              * tensor-parallel ranks keep every block. A step's
                              * sequences then give wtable */
    int64_t n_window_blocks; /* resolved by backend_create: the window side's blocks
                              * (0: none; the window layers are indexed by `table`) */
};

/* One sequence's rows in a step. */
struct backend_seq {
    const int32_t *table; /* its block table: positions 0 .. pos0 + n_rows - 1 have blocks */
    const int32_t *wtable;/* where o.n_window_blocks: its window table (kv_seq.wtable), the
                           * sliding-window layers' blocks from the first its rows see on */
    int slot;             /* which sequence in flight (0 .. n_slots - 1) */
    int64_t row0, n_rows; /* its rows: [row0, row0 + n_rows) of the step */
    int64_t pos0;         /* position of its first row; positions 0 .. pos0 - 1 are cached */
    bool prompt;          /* its rows are a prompt's (a recurrent layer runs them in its
                           * chunked form whatever their number); false: a decode row */
    bool more;            /* a prompt's rows with more of its rows to come in a later
                           * step: where they end inside a chunk a recurrent layer keeps
                           * the pool's checkpoint for them (backend_step's rule) */
};

/* Where on_layer's store holds a sequence of the step: its block table
 * there (entries for positions before the sequence's layer_from unused,
 * -1 where the store holds nothing of them) and its state slot. */
struct backend_layer_seq {
    const int32_t *table;
    int64_t slot;
};

/* A step. The sequences' rows tile [0, n_rows) in order. */
struct backend_batch {
    const int32_t *tokens;          /* [n_rows] */
    const bool *want_logits;        /* [n_rows] rows whose logits are returned; NULL: the
                                     * last row of each sequence */
    int64_t n_rows;
    const struct backend_seq *seqs; /* [n_seqs] */
    int64_t n_seqs;
    float *logits;                  /* [rows wanting logits, n_vocab], in row order */
    int32_t *greedy;                /* NULL, or [rows wanting logits]: each such row's greedy
                                     * token (sampler_greedy) instead of its logits, which
                                     * then need not leave the device (`logits`, if given,
                                     * may serve as scratch: its contents are undefined) */
    /* Called as each layer's mixer has written the step's K/V (or recurrent
     * state) of that layer, with a host store holding them, so a sequence's
     * rows may leave layer by layer while the next layers run (prefill and
     * decode on different ranks: generate/'s gen_callbacks.on_layer). The
     * CPU backend passes its own store and seqs NULL (the sequences' own
     * tables and slots index it); the CUDA backend a host copy of the rows
     * layer_from asks for (backend/gpu_cache.c), seqs [n_seqs] saying where
     * each sequence is in it, layer l's once its copy is done (while the
     * device runs layer l+1; the last before the step returns). Layers come
     * in order. The hook changes no result: the step's logits and cache are
     * those of the same step without it, bit for bit (the CUDA backend takes
     * the same route, a decode or verify step ungraphed). NULL: none. */
    void (*on_layer)(void *user, int64_t layer, const struct kv_store *kv,
                     const struct backend_layer_seq *seqs);
    void *layer_user;
    /* [n_seqs] with on_layer: the first position of each sequence the hook
     * reads (its pos0, or below it: positions cached before the step), -1:
     * none of it (a copying backend copies nothing of it); a recurrent
     * layer's state goes with any sequence that is read. NULL: every
     * sequence from its pos0. */
    const int64_t *layer_from;
    /* The CUDA backend with on_layer: no host copy, the hook called with kv
     * and seqs NULL moves the rows from the device itself (batch --pd's
     * NCCL path, backend_kv_send_part). The CPU backend
     * ignores it. */
    bool layer_device;
};

struct backend;
struct gpu_p2p; /* backend/gpu_p2p.h: the NCCL communicator of every rank */

/* What a backend is made of: the table every backend fills. */
struct backend_ops {
    /* Runs a step (backend_step's contract). */
    int (*step)(struct backend *b, const struct backend_batch *batch);
    /* The cache of `seq` (slot and table; n_pos positions) as a host store,
     * table and state slot: the CPU's own, or a host copy of the device's
     * (owned by the backend until the next call). */
    int (*kv_export)(struct backend *b, const struct backend_seq *seq, int64_t n_pos,
                     const struct kv_store **st, const int32_t **table, int64_t *slot);
    /* Fills positions [0, n_pos) of `seq` (and its recurrent state) from a
     * host store holding them in blocks 0, 1, ... and state slot 0 (a file
     * read: kv_file_read_body), any dtype. */
    int (*kv_import)(struct backend *b, const struct backend_seq *seq,
                     const struct kv_store *src, int64_t n_pos);
    /* Device memory held (0 on the CPU). */
    size_t (*device_bytes)(const struct backend *b);
    void (*destroy)(struct backend *b);
    /* batch --pd's cache between CUDA ranks by NCCL (backend/gpu_kv_p2p.c, the
     * backend_p2p_* and backend_kv_* calls below); NULL on the CPU: a paged
     * layer's blocks of a table, a recurrent layer's state in a slot. */
    int (*p2p_open)(struct backend *b, struct gpu_p2p **out);
    int (*kv_send_layer)(struct backend *b, struct gpu_p2p *p, int peer, const int32_t *table,
                         int64_t l, int64_t p0, int64_t p1);
    int (*kv_recv_layer)(struct backend *b, struct gpu_p2p *p, int peer, const int32_t *table,
                         int64_t l, int64_t p0, int64_t p1);
    int (*p2p_wait)(struct backend *b);
    int (*p2p_progress)(struct backend *b);
    int (*kv_send_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                         int64_t l);
    int (*kv_recv_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                         int64_t l);
};

/* A recurrent layer runs a prompt's rows in chunks that end at multiples of
 * this many positions (DeltaNet's chunked form, on the CPU and the GPU), so a
 * state's bits depend on where a step cuts a prompt unless the cut falls on
 * such a multiple (generate/engine.c cuts there: batch invariance). */
#define BACKEND_STATE_CHUNK 64

/* The pool's one DeltaNet checkpoint (docs/kvcache.md). A prompt whose step
 * ends inside a chunk with rows to come (`more`) keeps the unfinished
 * chunk's start state and rows so that its next step runs the chunk again
 * whole: the same bits at any cut. One checkpoint serves the pool: it
 * belongs to one slot at a time (backend.ckpt_holder; its header names the
 * slot). backend_step decides, from the batch alone (so tensor-parallel
 * ranks fed the same batches agree), before the backend runs it:
 *   - ckpt_read: the holder's slot where its prompt is in the step: it
 *     continues the checkpoint (where its header ends at the step's rows);
 *   - ckpt_take: the slot of a prompt that ends inside a chunk with more
 *     to come: the holder where it is in the step (the holder check: no
 *     other prompt of its step may; one that would keeps none and later
 *     continues from its cut state, within rounding: a caller breaking
 *     backend_prompt_rows' rule), else the step's first such prompt;
 * after it the taker holds the checkpoint, and a holder in the step that
 * took none gives it back; so does a state imported into its slot. */
struct backend_ckpt_plan {
    int read; /* slot, -1: none */
    int take; /* slot, -1: none */
};

/* The rule a scheduler cuts a hybrid model's prompt by (generate/engine.c's
 * prompt_rows, and any other): `rows` of a prompt in `slot` at pos0 with
 * `left` rows to go (rows <= left), of which the step would take `rows`,
 * where the checkpoint's holder is `holder_live` (its prompt still has rows
 * to come): the rows it takes. A step ending inside a chunk with more to
 * come needs the checkpoint; while another live slot holds it the prompt is
 * cut at the chunk boundary instead (a cut at a multiple of
 * BACKEND_STATE_CHUNK needs none; 0 rows: it waits a step). */
int64_t backend_prompt_rows(const struct backend *b, int slot, int64_t pos0, int64_t rows,
                            int64_t left, bool holder_live);

/* What every backend shares; each embeds it first. */
struct backend {
    const struct backend_ops *ops;
    const struct model *m;
    struct backend_opts o;     /* n_blocks resolved */
    bool shares_blocks;        /* its attention reads block tables: prefixes can be shared */
    char device[32];           /* "cpu", "cuda:0" */
    char device_name[128];     /* "cpu (avx2)", "NVIDIA H200" */
    int threads;               /* CPU threads used (1 on CUDA) */
    size_t weight_bytes;       /* device memory of the weights (0 on the CPU) */
    int64_t step_nodes;        /* launches of the last decode step: its graph's nodes on
                                  CUDA, the emulator's count without graphs; 0 on the CPU */
    int64_t dn_chunked_rows;   /* DeltaNet rows run in the chunked form so far, summed over
                                  layers (CUDA; a test's witness of the kernel choice) */
    struct kv_memory *kv_mem;  /* the pool's layers (kv_memory_of at the pool's dtype),
                                * owned; NULL for a backend without a pool (a test's) */
    int64_t n_states;          /* recurrent state slots: n_slots when a layer is
                                * recurrent (a slot's state is indexed by the slot), else 0 */
    int ckpt_holder;           /* the slot + 1 holding the pool's DeltaNet checkpoint (0:
                                * none; zero-initialized backends start without) */
    struct backend_ckpt_plan ckpt; /* the running step's (backend_step sets it) */
    float *host_logits;        /* [n_slots, n_vocab] host memory its step writes logits into
                                * fastest (CUDA: page-locked, so a batch's download runs at
                                * the bus's speed; up to a GiB of it), owned by the
                                * backend, for one engine at a time; NULL: any will do */
};

/* The window side's blocks a backend with opts o will have for memory mem
 * (kv_memory_window_blocks): 0 unless o asks for the window rule and the
 * backend takes it (the CPU or CUDA in one process) and mem has sliding-window
 * layers. `ignite batch --kv-mem` asks it before the backend exists. */
int64_t backend_window_blocks(const struct kv_memory *mem, const struct backend_opts *o);

/* Builds the backend for model m (borrowed; outlives the backend): uploads
 * weights for CUDA and allocates the KV pool's memory (refused up front,
 * with both numbers, when it cannot fit). Returns IG_OK, or IG_E_NOMEM,
 * IG_E_DEVICE or another status after one line on stderr. */
int backend_create(const struct model *m, const struct backend_opts *o, struct backend **out);
void backend_free(struct backend *b);

/* The CUDA backend's entry points, what --device cuda reaches (backend/gpu.h,
 * one table per build of it: backend/gpu_entry.c). `ignite` has the nvcc
 * build's where nvcc was found, else none; the test program `ignite_emu`
 * sets the emulated one's (tests/emu/ignite_emu_main.c) before main runs. */
struct cpu_tp;
struct backend_cuda {
    bool emulated; /* the CPU emulator's: no GPU (--version and bench say so) */
    int (*device_count)(void);
    int (*create)(const struct model *m, const struct backend_opts *o, struct backend **out);
    /* a tensor-parallel rank's (backend/tp.h) and, once every rank made its
     * backend, the all-reduce between them */
    int (*create_tp)(const struct model *m, const struct backend_opts *o, struct cpu_tp *tp,
                     struct backend **out);
    int (*tp_connect)(struct backend *b);
};
void backend_set_cuda(const struct backend_cuda *cuda);
/* The table in use: NULL where this program has no CUDA backend. */
const struct backend_cuda *backend_cuda(void);

/* Runs the step: n_rows <= max_rows, n_seqs <= n_slots, each sequence's
 * positions below pos0 cached, pos0 + n_rows <= n_ctx, and its table
 * covering its rows. Writes the logits of the rows that want them. Returns
 * IG_OK, IG_E_INPUT (a token id out of range), IG_E_NOMEM or IG_E_DEVICE. */
int backend_step(struct backend *b, const struct backend_batch *batch);

/* For the backends' step: the step's shape against b's limits (the engine's
 * invariants: 1..max_rows rows in 1..n_slots sequences tiling them in order,
 * each within n_ctx). IG_OK, or IG_E_INTERNAL after one line. */
int backend_check_step(const struct backend *b, const struct backend_batch *batch);

/* Tokens [0, n) of one sequence at positions pos0.. in one step (n <=
 * max_rows); the logits of the last into logits [n_vocab]. */
int backend_run_seq(struct backend *b, const int32_t *table, int slot, const int32_t *tokens,
                    int64_t n, int64_t pos0, float *logits);

/* The backend_ops of the same name. */
int backend_kv_export(struct backend *b, const struct backend_seq *seq, int64_t n_pos,
                      const struct kv_store **st, const int32_t **table, int64_t *slot);
int backend_kv_import(struct backend *b, const struct backend_seq *seq,
                      const struct kv_store *src, int64_t n_pos);
size_t backend_device_bytes(const struct backend *b);

/* batch --pd's cache by NCCL between CUDA ranks, no host trip (backend/
 * gpu_kv_p2p.c; the calls of backend/gpu.h of the same names), for cli/:
 * whether b has the path (false with `why` filled on a backend without it:
 * every kind of layer moves); the communicator of every rank (collective:
 * every rank calls it, each with a CUDA backend; IG_OK, or IG_E_DEVICE
 * after one line, rank 0's); a paged layer's blocks holding rows [p0, p1)
 * of `table` sent (the prefill side, from a step's on_layer hook with
 * backend_batch.layer_device) or received straight into the pool's blocks
 * of `table` (the decode side: reserved for the sequence by
 * engine_history_reserve, adopted at admission by gen_history.blocks).
 * Both ranks' pools of the same types and layers. Sends and receives
 * return once queued on the device's transfer stream: the decode side
 * calls backend_p2p_wait before the engine adopts received blocks or
 * releases blocks with receives pending (the main stream's later work
 * waits for every transfer queued so far; the host does not), and every
 * rank backend_p2p_progress where it would idle or block on another rank
 * (the emulator runs the transfers there; a GPU on its own). */
bool backend_p2p_fits(const struct backend *b, char *why, size_t cap);
int backend_p2p_open(struct backend *b, struct gpu_p2p **out);
void backend_p2p_free(struct gpu_p2p *p);
int backend_kv_send_layer(struct backend *b, struct gpu_p2p *p, int peer, const int32_t *table,
                          int64_t l, int64_t p0, int64_t p1);
int backend_kv_recv_layer(struct backend *b, struct gpu_p2p *p, int peer, const int32_t *table,
                          int64_t l, int64_t p0, int64_t p1);
int backend_p2p_wait(struct backend *b);
int backend_p2p_progress(struct backend *b);

/* A sequence in a pool, for the NCCL path: its block table, its window
 * table where the pool keeps one (o.n_window_blocks; else NULL), its state
 * slot and its positions in all (the whole prompt's: the cache's). */
struct backend_p2p_seq {
    const int32_t *table, *wtable;
    int64_t slot, n_pos;
};

/* Layer l's part of sequence s, rows [p0, p1) (p0 < p1 <= s->n_pos), sent
 * to rank peer or received from it into s's own blocks and slot, what the
 * other side posts for the same l, p0, p1 and n_pos: a paged layer's
 * blocks holding the rows (backend_kv_send_layer); a window layer's under
 * the window rule through the window table, only those from the first a
 * row at n_pos sees (kv_window_first: those before are given back on the
 * decode side, and may be on the prefill side); a recurrent layer's state
 * in s's slot, once it is the prompt's (p0 0, p1 n_pos); nothing of a
 * shared layer. *bytes (where not NULL): the bytes it moves. IG_OK, or
 * IG_E_DEVICE after one line. */
int backend_kv_send_part(struct backend *b, struct gpu_p2p *p, int peer,
                         const struct backend_p2p_seq *s, int64_t l, int64_t p0, int64_t p1,
                         int64_t *bytes);
int backend_kv_recv_part(struct backend *b, struct gpu_p2p *p, int peer,
                         const struct backend_p2p_seq *s, int64_t l, int64_t p0, int64_t p1,
                         int64_t *bytes);
/* Of the device memory, the weights' (b->weight_bytes). */
size_t backend_weight_bytes(const struct backend *b);

/* The pool's layers (b->kv_mem), and the bytes of n_blocks blocks and
 * n_states state slots of them (kv_memory_bytes; under the window rule the
 * window side's blocks at most its own: the most a pool of n_blocks holds). */
const struct kv_memory *backend_kv_memory(const struct backend *b);
double backend_kv_bytes(const struct backend *b, int64_t n_blocks, int64_t n_states);

#endif
