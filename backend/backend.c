/* backend/backend.c: picking the device, building the backend of that kind
 * (backend/cpu.c, or backend/gpu.c through the CUDA table: nvcc's build
 * where nvcc was found at build time, the emulated one in ignite_emu), and
 * the calls that go through a backend's table of functions.
 * Covered by tests/cli/ and tests/emu/test_backend_emu.c. */
#include "backend/backend.h"

#include "backend/cpu.h"
#include "backend/gpu_p2p.h"
#include "backend/tp.h"
#include "core/status.h"

#if IGNITE_HAVE_CUDA
#include "backend/gpu.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* ---- choosing the device --------------------------------------------------- */

int backend_parse_device(const char *spec, struct backend_device *dev)
{
    *dev = (struct backend_device){.kind = BACKEND_CPU};
    if (!strcmp(spec, "auto")) {
        dev->is_auto = true;
        return IG_OK;
    }
    if (!strcmp(spec, "cpu"))
        return IG_OK;
    if (!strncmp(spec, "cuda", 4) && (spec[4] == '\0' || spec[4] == ':')) {
        dev->kind = BACKEND_CUDA;
        if (spec[4] == '\0')
            return IG_OK;
        char *end;
        long idx = strtol(spec + 5, &end, 10);
        if (spec[5] >= '0' && spec[5] <= '9' && !*end && idx <= 1023) {
            dev->index = (int)idx;
            return IG_OK;
        }
    }
    return ig_error(IG_E_USAGE, "--device: expected auto, cpu, cuda or cuda:N, got '%s'", spec);
}

#if IGNITE_HAVE_CUDA
static const struct backend_cuda *cuda = &gpu_entry_cuda;
#else
static const struct backend_cuda *cuda;
#endif

void backend_set_cuda(const struct backend_cuda *c)
{
    cuda = c;
}

const struct backend_cuda *backend_cuda(void)
{
    return cuda;
}

static int cuda_devices(void)
{
    return cuda ? cuda->device_count() : 0;
}

int64_t backend_batch_rows_default(enum backend_kind kind)
{
    return kind == BACKEND_CUDA ? 2048 : 512;
}

int backend_resolve_device(struct backend_device *dev)
{
    if (dev->is_auto) {
        dev->kind = cuda_devices() > 0 ? BACKEND_CUDA : BACKEND_CPU;
        dev->index = 0;
        dev->is_auto = false;
        return IG_OK;
    }
    if (dev->kind == BACKEND_CPU)
        return IG_OK;
    if (!cuda)
        return ig_error(IG_E_DEVICE, "--device cuda:%d: this ignite was built without CUDA (nvcc "
                        "was not found at build time); use --device cpu", dev->index);
    int n = cuda_devices();
    if (n == 0)
        return ig_error(IG_E_DEVICE, "--device cuda:%d: no usable CUDA device (no GPU or no "
                        "driver); use --device cpu", dev->index);
    if (dev->index >= n)
        return ig_error(IG_E_DEVICE, "--device cuda:%d: there %s only %d CUDA device%s (0..%d)",
                        dev->index, n == 1 ? "is" : "are", n, n == 1 ? "" : "s", n - 1);
    return IG_OK;
}

/* ---- lifetime ----------------------------------------------------------------- */

int64_t backend_window_blocks(const struct kv_memory *mem, const struct backend_opts *o)
{
    /* the CPU and CUDA backends in one process; tensor-parallel ranks keep
     * every block */
    if (!o->free_window_blocks || backend_tp_wanted())
        return 0;
    return kv_memory_window_blocks(mem, o->n_slots, o->n_ctx, o->max_rows);
}

/* The largest E8M0 byte the CUDA kernels' f16 holds MXFP4 weights of
 * exactly or at all (12 x 2^12; ops/gpu_moe.h, docs/gpu.md). */
#define BACKEND_CUDA_MXFP4_E_MAX 140

int backend_create(const struct model *m, const struct backend_opts *o, struct backend **out)
{
    *out = NULL;
    IG_ASSERT(o->n_ctx >= 1 && o->max_rows >= 1 && o->n_slots >= 1 && o->n_blocks >= 0 &&
              !o->device.is_auto);
    struct backend_opts r = *o;
    if (!r.n_blocks)
        r.n_blocks = (int64_t)r.n_slots * kv_blocks_for(r.n_ctx);
    r.n_window_blocks = 0; /* the backend sets it (backend_window_blocks) */
    if (backend_tp_wanted())
        r.free_window_blocks = false;
    /* MXFP4 weights past what the device computes (the CUDA tile holds them
     * in f16: ops/gpu_moe.h) would give inf and NaN logits, silently */
    int st = r.device.kind == BACKEND_CPU
                 ? model_check_mxfp4(m, MODEL_MXFP4_E_FINITE, "not finite (at most 252)")
                 : model_check_mxfp4(m, BACKEND_CUDA_MXFP4_E_MAX,
                                     "past f16 in the CUDA kernels (at most 140: weights "
                                     "under 65536); the CPU computes up to 252");
    if (st)
        return st;
    /* fp8 is the CUDA pool's type (kvcache/kv_devq.h); the CPU attention
     * reads f32, f16, q8_0 and q4_0. */
    if (r.device.kind == BACKEND_CPU && (r.kv_dtype == KV_FP8 || r.kv_dtype_v == KV_FP8))
        return ig_error(IG_E_USAGE, "an fp8 KV cache runs on --device cuda only; the CPU's "
                        "cache is f32, f16, q8_0 or q4_0");
    if (r.device.kind == BACKEND_CPU && backend_tp_wanted()) /* mpirun -np N */
        return backend_tp_create(m, &r, out);
    if (r.device.kind == BACKEND_CPU)
        return backend_cpu_create(m, &r, out);
    /* The CUDA pool holds f16, q8_0 or fp8 (kvcache/kv_devq.h); q4_0 is the
     * CPU's. A tensor-parallel rank's pool is of the same type over its own
     * KV heads (whole heads: a block of 32 values never straddles ranks). */
    if (r.kv_dtype == KV_Q4_0 || r.kv_dtype_v == KV_Q4_0)
        return ig_error(IG_E_USAGE, "a q4_0 KV cache runs on the CPU only (--device cpu); the "
                        "CUDA backend's cache is f16, q8_0 or fp8");
    if (backend_tp_wanted()) /* mpirun -np N --device cuda: a GPU a rank */
        return backend_tp_create(m, &r, out);
    if (!cuda)
        return ig_error(IG_E_DEVICE, "this ignite was built without CUDA");
    return cuda->create(m, &r, out);
}

void backend_free(struct backend *b)
{
    if (b)
        b->ops->destroy(b);
}

/* ---- through the table ------------------------------------------------------------ */

int backend_check_step(const struct backend *b, const struct backend_batch *batch)
{
    const struct backend_opts *o = &b->o;
    if (batch->n_rows < 1 || batch->n_rows > o->max_rows || batch->n_seqs < 1 ||
        batch->n_seqs > o->n_slots)
        return ig_error(IG_E_INTERNAL, "a step of %lld rows in %lld sequences: the backend "
                        "takes 1..%lld rows of 1..%d", (long long)batch->n_rows,
                        (long long)batch->n_seqs, (long long)o->max_rows, o->n_slots);
    int64_t row = 0;
    for (int64_t i = 0; i < batch->n_seqs; i++) {
        const struct backend_seq *s = &batch->seqs[i];
        if (s->row0 != row || s->n_rows < 1 || s->pos0 < 0 || s->pos0 + s->n_rows > o->n_ctx)
            return ig_error(IG_E_INTERNAL, "step sequence %lld: rows %lld+%lld at position "
                            "%lld (context %lld)", (long long)i, (long long)s->row0,
                            (long long)s->n_rows, (long long)s->pos0, (long long)o->n_ctx);
        row += s->n_rows;
    }
    if (row != batch->n_rows)
        return ig_error(IG_E_INTERNAL, "step sequences cover %lld of %lld rows", (long long)row,
                        (long long)batch->n_rows);
    return IG_OK;
}

/* ---- the pool's one DeltaNet checkpoint (backend.h) ----------------------------- */

static bool ends_in_chunk(const struct backend_seq *q)
{
    return q->prompt && q->more && (q->pos0 + q->n_rows) % BACKEND_STATE_CHUNK;
}

static struct backend_ckpt_plan ckpt_plan(const struct backend *b,
                                          const struct backend_batch *batch)
{
    struct backend_ckpt_plan p = {-1, -1};
    int holder = b->ckpt_holder - 1;
    bool holder_here = false;
    for (int64_t i = 0; i < batch->n_seqs; i++)
        if (batch->seqs[i].slot == holder) {
            holder_here = true;
            p.read = batch->seqs[i].prompt ? holder : -1;
        }
    for (int64_t i = 0; i < batch->n_seqs && p.take < 0; i++) {
        const struct backend_seq *q = &batch->seqs[i];
        if (ends_in_chunk(q))
            /* the holder check: never two prompts' rows in one checkpoint */
            p.take = !holder_here || q->slot == holder ? q->slot : -2;
    }
    p.take = p.take < 0 ? -1 : p.take;
    return p;
}

int64_t backend_prompt_rows(const struct backend *b, int slot, int64_t pos0, int64_t rows,
                            int64_t left, bool holder_live)
{
    int holder = b->ckpt_holder - 1;
    bool mid = b->n_states && rows < left && (pos0 + rows) % BACKEND_STATE_CHUNK;
    if (!mid || holder < 0 || holder == slot || !holder_live)
        return rows;
    /* another prompt holds it: end at the chunk boundary (0: wait a step) */
    int64_t cut = (pos0 + rows) / BACKEND_STATE_CHUNK * BACKEND_STATE_CHUNK - pos0;
    return cut > 0 ? cut : 0;
}

int backend_step(struct backend *b, const struct backend_batch *batch)
{
    b->ckpt = ckpt_plan(b, batch);
    int st = b->ops->step(b, batch);
    if (st != IG_OK) { /* what the step left there is read by no one */
        b->ckpt_holder = 0;
    } else if (b->ckpt.take >= 0) {
        b->ckpt_holder = b->ckpt.take + 1;
    } else {
        for (int64_t i = 0; i < batch->n_seqs; i++)
            if (batch->seqs[i].slot == b->ckpt_holder - 1)
                b->ckpt_holder = 0; /* its step ended on a boundary, its prompt, or decoded */
    }
    b->ckpt = (struct backend_ckpt_plan){-1, -1};
    return st;
}

int backend_run_seq(struct backend *b, const int32_t *table, int slot, const int32_t *tokens,
                    int64_t n, int64_t pos0, float *logits)
{
    IG_ASSERT(n >= 1 && n <= b->o.max_rows && logits);
    struct backend_seq seq = {.table = table, .slot = slot, .row0 = 0, .n_rows = n, .pos0 = pos0};
    struct backend_batch batch = {.tokens = tokens, .n_rows = n, .seqs = &seq, .n_seqs = 1,
                                  .logits = logits};
    return backend_step(b, &batch);
}

int backend_kv_export(struct backend *b, const struct backend_seq *seq, int64_t n_pos,
                      const struct kv_store **st, const int32_t **table, int64_t *slot)
{
    IG_ASSERT(n_pos >= 1 && n_pos <= b->o.n_ctx);
    return b->ops->kv_export(b, seq, n_pos, st, table, slot);
}

int backend_kv_import(struct backend *b, const struct backend_seq *seq,
                      const struct kv_store *src, int64_t n_pos)
{
    IG_ASSERT(n_pos >= 1 && n_pos <= b->o.n_ctx && src->n_blocks >= kv_blocks_for(n_pos));
    if (b->ckpt_holder == seq->slot + 1) /* a state from elsewhere: nothing to continue */
        b->ckpt_holder = 0;
    return b->ops->kv_import(b, seq, src, n_pos);
}

size_t backend_device_bytes(const struct backend *b)
{
    return b->ops->device_bytes(b);
}

bool backend_p2p_fits(const struct backend *b, char *why, size_t cap)
{
    if (!b->ops->p2p_open)
        snprintf(why, cap, "the %s backend has no NCCL path (CUDA only)", b->device);
    return b->ops->p2p_open != NULL;
}

int backend_p2p_open(struct backend *b, struct gpu_p2p **out)
{
    IG_ASSERT(b->ops->p2p_open);
    return b->ops->p2p_open(b, out);
}

void backend_p2p_free(struct gpu_p2p *p)
{
    gpu_p2p_free(p);
}

int backend_kv_send_layer(struct backend *b, struct gpu_p2p *p, int peer, const int32_t *table,
                          int64_t l, int64_t p0, int64_t p1)
{
    IG_ASSERT(b->ops->kv_send_layer && l >= 0 && l < b->kv_mem->n_layer && p1 <= b->o.n_ctx);
    return b->ops->kv_send_layer(b, p, peer, table, l, p0, p1);
}

int backend_kv_recv_layer(struct backend *b, struct gpu_p2p *p, int peer, const int32_t *table,
                          int64_t l, int64_t p0, int64_t p1)
{
    IG_ASSERT(b->ops->kv_recv_layer && l >= 0 && l < b->kv_mem->n_layer && p1 <= b->o.n_ctx);
    return b->ops->kv_recv_layer(b, p, peer, table, l, p0, p1);
}

int backend_p2p_wait(struct backend *b)
{
    IG_ASSERT(b->ops->p2p_wait);
    return b->ops->p2p_wait(b);
}

int backend_p2p_progress(struct backend *b)
{
    IG_ASSERT(b->ops->p2p_progress);
    return b->ops->p2p_progress(b);
}

/* What layer l's part [*p0, p1) of s moves (backend_kv_send_part): none,
 * the state in s's slot, or the blocks of *table holding rows [*p0, p1),
 * *p0 raised past the window's blocks given back. */
enum part_kind { PART_NONE, PART_STATE, PART_ROWS };

static enum part_kind part_of(const struct backend *b, const struct backend_p2p_seq *s, int64_t l,
                              int64_t *p0, int64_t p1, const int32_t **table)
{
    const struct kv_memory *mem = b->kv_mem;
    IG_ASSERT(l >= 0 && l < mem->n_layer && 0 <= *p0 && *p0 < p1 && p1 <= s->n_pos &&
              s->n_pos <= b->o.n_ctx);
    switch (mem->layers[l].kind) {
    case KV_SHARED: /* its rows are its source's */
        return PART_NONE;
    case KV_RECURRENT:
        IG_ASSERT(*p0 == 0 && p1 == s->n_pos && s->slot >= 0 && s->slot < b->n_states);
        return PART_STATE;
    case KV_FULL:
    case KV_WINDOW:
        break;
    }
    *table = s->table;
    if (b->o.n_window_blocks && kv_layer_windowed(mem, l)) {
        int64_t first = kv_window_first(kv_memory_window_span(mem), s->n_pos) * KV_BLOCK;
        IG_ASSERT(s->wtable);
        *table = s->wtable;
        *p0 = *p0 > first ? *p0 : first;
    }
    return *p0 < p1 ? PART_ROWS : PART_NONE;
}

/* The bytes of layer l's part that part_of chose: a state, or whole
 * blocks of K and V as the pool holds them. */
static int64_t part_bytes(const struct backend *b, int64_t l, enum part_kind kind, int64_t p0,
                          int64_t p1)
{
    const struct kv_memory *mem = b->kv_mem;
    const struct kv_layer_mem *L = &mem->layers[l];
    if (kind != PART_ROWS)
        return kind == PART_STATE ? (int64_t)L->state_bytes : 0;
    int64_t elems = kv_layer_block_elems(L);
    return (kv_blocks_for(p1) - p0 / KV_BLOCK) *
           (int64_t)(kv_dtype_row_bytes(mem->dtype, elems) +
                     kv_dtype_row_bytes(mem->dtype_v, elems));
}

/* backend_kv_send_part (send) or _recv_part. */
static int move_part(struct backend *b, struct gpu_p2p *p, int peer,
                     const struct backend_p2p_seq *s, int64_t l, int64_t p0, int64_t p1,
                     int64_t *bytes, bool send)
{
    const int32_t *table = NULL;
    enum part_kind kind = part_of(b, s, l, &p0, p1, &table);
    if (bytes)
        *bytes = part_bytes(b, l, kind, p0, p1);
    switch (kind) {
    case PART_NONE:
        return IG_OK;
    case PART_STATE:
        IG_ASSERT(b->ops->kv_send_state && b->ops->kv_recv_state);
        if (send)
            return b->ops->kv_send_state(b, p, peer, s->slot, l);
        if (b->ckpt_holder == s->slot + 1) /* a state from elsewhere: nothing to continue */
            b->ckpt_holder = 0;
        return b->ops->kv_recv_state(b, p, peer, s->slot, l);
    case PART_ROWS:
        break;
    }
    return send ? backend_kv_send_layer(b, p, peer, table, l, p0, p1)
                : backend_kv_recv_layer(b, p, peer, table, l, p0, p1);
}

int backend_kv_send_part(struct backend *b, struct gpu_p2p *p, int peer,
                         const struct backend_p2p_seq *s, int64_t l, int64_t p0, int64_t p1,
                         int64_t *bytes)
{
    return move_part(b, p, peer, s, l, p0, p1, bytes, true);
}

int backend_kv_recv_part(struct backend *b, struct gpu_p2p *p, int peer,
                         const struct backend_p2p_seq *s, int64_t l, int64_t p0, int64_t p1,
                         int64_t *bytes)
{
    return move_part(b, p, peer, s, l, p0, p1, bytes, false);
}

size_t backend_weight_bytes(const struct backend *b)
{
    return b->weight_bytes;
}

const struct kv_memory *backend_kv_memory(const struct backend *b)
{
    return b->kv_mem;
}

double backend_kv_bytes(const struct backend *b, int64_t n_blocks, int64_t n_states)
{
    /* under the window rule, the window side holds at most its own blocks */
    int64_t nw = b->o.n_window_blocks;
    return kv_memory_bytes_windowed(b->kv_mem, n_blocks, nw && n_blocks > nw ? nw : n_blocks,
                                    n_states);
}
