/* backend/gpu_kv_p2p.c: batch --pd's cache between CUDA ranks by NCCL
 * (backend/gpu_p2p.h), with no host trip: a prefill rank sends a layer's
 * blocks of a sequence straight from its pool (gpu_kv_send_layer, after
 * the layer's mixer), a decode rank receives them straight into the blocks
 * of its own pool it reserved for the sequence (gpu_kv_recv_layer, by the
 * reserved blocks' table: no staging store, no copy; the engine adopts
 * those blocks at admission, gen_history.blocks, after gpu_kv_p2p_wait).
 * Both on the device's transfer stream (DEV_STREAM_P2P, "the stream" below),
 * so that neither rank's main stream waits on the other rank: see queue_group
 * for the order of the two streams.
 * A block moves as the pool holds
 * it (f16, or a quantized pool's regions), one ncclSend for K and one for
 * V a block, every send of a layer in one group: the receiver posts the
 * same counts from the layer and rows alone (the header, which goes over
 * MPI), whatever the sender's blocks are. Rows past the last one of a
 * sequence's last block come along as the sender has them; nothing reads
 * them (a position is read once written). A window layer under the window
 * rule moves the same way through the window tables (its own block ids;
 * which blocks: backend_kv_send_part). A recurrent layer's state moves
 * whole, slot to slot, once it is the prompt's (gpu_kv_send_state,
 * gpu_kv_recv_state: into the slot the decode rank's engine holds for the
 * sequence, engine_history_reserve). Both pools must be of the same types
 * (kv_memory_same_layers and dtypes; the caller checks at the head).
 * Covered by tests/emu/pd_nccl_emu.c and tests/tp/test_pd_cli.py. */
#include "backend/gpu_impl.h"

#include "backend/gpu_p2p.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of one block of layer l's K (v false) or V in the pool. */
static size_t block_bytes(const struct gpu_backend *g, int64_t l, bool v)
{
    const struct kv_memory *mem = g->base.kv_mem;
    return kv_dtype_row_bytes(v ? mem->dtype_v : mem->dtype,
                              kv_layer_block_elems(&mem->layers[l]));
}

static bool paged(const struct gpu_backend *g, int64_t l)
{
    enum kv_kind k = g->base.kv_mem->layers[l].kind;
    return k != KV_SHARED && k != KV_RECURRENT;
}

/* The block ids layer l's tables hold: the window side's, its zero block
 * apart (never written, never moved), or the pool's. */
static int64_t layer_ids(const struct gpu_backend *g, int64_t l)
{
    return gpu_layer_windowed(g, l) ? g->n_wblocks : g->n_blocks;
}

/* The blocks holding rows [p0, p1). */
static void block_range(int64_t p0, int64_t p1, int64_t *b0, int64_t *b1)
{
    *b0 = p0 / KV_BLOCK;
    *b1 = kv_blocks_for(p1);
}

/* ---- the transfer stream ------------------------------------------------------------- */

/* One NCCL group of sends (or receives) of whole buffers to (from) one peer,
 * queued on the stream (dev_stream_call) and freed by it. */
struct p2p_group {
    struct gpu_p2p *p;
    int peer;
    bool send;
    int64_t n, cap;
    size_t most;          /* the largest op's bytes */
    struct p2p_op {
        void *buf;
        size_t bytes;
    } op[];
};

static struct p2p_group *group_new(struct gpu_p2p *p, int peer, bool send, int64_t cap)
{
    struct p2p_group *grp = malloc(sizeof *grp + (size_t)cap * sizeof grp->op[0]);
    if (grp)
        *grp = (struct p2p_group){.p = p, .peer = peer, .send = send, .cap = cap};
    else
        (void)ig_error(IG_E_NOMEM, "out of memory for %lld NCCL transfers", (long long)cap);
    return grp;
}

static void group_add(struct p2p_group *grp, const void *buf, size_t bytes)
{
    IG_ASSERT(grp->n < grp->cap);
    grp->op[grp->n++] = (struct p2p_op){(void *)buf, bytes};
    grp->most = bytes > grp->most ? bytes : grp->most;
}

/* The group's NCCL calls on `stream` (dev_stream_fn). Stale (the emulator's
 * word: the stream had not waited for the main stream's latest work), a
 * send's bytes could be read before they are written: 0xff goes instead;
 * a receive's could land while the main stream's earlier steps still read
 * its blocks (freed by a sequence, reserved again), which the emulator has
 * run already and cannot show: it fails instead, once run (the peer's
 * sends are not left waiting). */
static int run_group(void *user, void *stream, enum dev_call how)
{
    struct p2p_group *grp = user;
    unsigned char *poison = NULL;
    int st = IG_OK;
    if (how == DEV_CALL_STALE && grp->send && (poison = malloc(grp->most ? grp->most : 1)))
        memset(poison, 0xff, grp->most);
    if (how == DEV_CALL_STALE && grp->send && !poison)
        st = ig_error(IG_E_NOMEM, "out of memory for a stale NCCL send's bytes");
    int early = how == DEV_CALL_STALE && !grp->send
                    ? ig_error(IG_E_INTERNAL, "NCCL receives from rank %d queued before the "
                               "transfer stream waited for the main stream (their blocks may "
                               "still be read there)", grp->peer)
                    : IG_OK;
    if (how != DEV_CALL_DROP && st == IG_OK && (st = gpu_p2p_group_start(grp->p)) == IG_OK) {
        for (int64_t i = 0; i < grp->n && st == IG_OK; i++) {
            const struct p2p_op *o = &grp->op[i];
            st = grp->send ? gpu_p2p_send(grp->p, poison ? poison : o->buf, o->bytes, grp->peer,
                                          stream)
                           : gpu_p2p_recv(grp->p, o->buf, o->bytes, grp->peer, stream);
        }
        int end = gpu_p2p_group_end(grp->p); /* (a group started is ended, failed or not) */
        st = st != IG_OK ? st : end;
    }
    free(poison);
    free(grp);
    return st != IG_OK ? st : early;
}

/* Queues grp (owned from here) on the stream after the main stream's work
 * so far, and marks it as the stream's last (p2p_done). A send reads blocks
 * the main stream has just written (the layer's mixer); a receive writes
 * blocks that a sequence freed here may still be read by in the main
 * stream's queued steps: either waits for the main stream (CUDA runtime
 * API, cudaStreamWaitEvent: work queued after it waits for the event's
 * record; a record costs no host time). The other way round, the main stream
 * waits for the stream only where it would touch the blocks: a prefill
 * rank's next step (gpu_kv_p2p_fence), a decode rank's admission or release
 * of the received blocks (gpu_kv_p2p_wait). The host never waits: NCCL's
 * calls return once queued on the stream (NCCL user guide, api/group.html:
 * ncclGroupEnd returns when the operations are enqueued on their streams). */
static int queue_group(struct gpu_backend *g, struct p2p_group *grp)
{
    int st = g->p2p_main ? IG_OK : IG_DEV(dev_event_create)(g->dev, &g->p2p_main);
    if (st == IG_OK && !g->p2p_done)
        st = IG_DEV(dev_event_create)(g->dev, &g->p2p_done);
    if (st == IG_OK)
        st = IG_DEV(dev_event_record)(g->dev, DEV_STREAM_MAIN, g->p2p_main);
    if (st == IG_OK)
        st = IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_P2P, g->p2p_main);
    if (st != IG_OK) {
        free(grp);
        return st;
    }
    g->p2p_sent |= grp->send;
    g->p2p = grp->p;
    st = IG_DEV(dev_stream_call)(g->dev, DEV_STREAM_P2P, run_group, grp);
    int rec = IG_DEV(dev_event_record)(g->dev, DEV_STREAM_P2P, g->p2p_done);
    return st != IG_OK ? st : rec;
}

/* Layer l's blocks of `table` holding rows [p0, p1), K then V a block each,
 * in one group to or from peer. */
static int layer_group(struct backend *b, struct gpu_p2p *p, int peer, bool send,
                       const int32_t *table, int64_t l, int64_t p0, int64_t p1)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    if (!paged(g, l) || p1 <= p0)
        return IG_OK;
    int64_t b0, b1;
    block_range(p0, p1, &b0, &b1);
    const size_t kb = block_bytes(g, l, false), vb = block_bytes(g, l, true);
    unsigned char *k = (void *)g->layers[l].k_cache, *v = (void *)g->layers[l].v_cache;
    struct p2p_group *grp = group_new(p, peer, send, 2 * (b1 - b0));
    if (!grp)
        return IG_E_NOMEM;
    for (int64_t i = b0; i < b1; i++) {
        IG_ASSERT(table[i] >= 0 && table[i] < layer_ids(g, l));
        group_add(grp, k + (size_t)table[i] * kb, kb);
        group_add(grp, v + (size_t)table[i] * vb, vb);
    }
    return queue_group(g, grp);
}

int IG_DEV(gpu_kv_send_layer)(struct backend *b, struct gpu_p2p *p, int peer,
                              const int32_t *table, int64_t l, int64_t p0, int64_t p1)
{
    return layer_group(b, p, peer, true, table, l, p0, p1);
}

int IG_DEV(gpu_kv_recv_layer)(struct backend *b, struct gpu_p2p *p, int peer,
                              const int32_t *table, int64_t l, int64_t p0, int64_t p1)
{
    return layer_group(b, p, peer, false, table, l, p0, p1);
}

/* The main stream's next work after every send queued so far, before a step
 * writes the pool: a block a chunk left partial is sent again, whole, with
 * the next chunk, which writes into it; the blocks a handed-off prompt frees
 * go to the next prompts. One wait at the step's start, not one per block or
 * layer: the host knows neither which blocks a step writes nor when the
 * peer takes the sends, and a prefill rank's step waits there only for the
 * sends of the step before's last layers (the earlier ones ran beside it). */
int IG_DEV(gpu_kv_p2p_fence)(struct gpu_backend *g)
{
    if (!g->p2p_sent)
        return IG_OK;
    g->p2p_sent = false;
    g->p2p_behind = true;
    return IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_MAIN, g->p2p_done);
}

int IG_DEV(gpu_kv_p2p_wait)(struct backend *b)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    g->p2p_sent = false;
    g->p2p_behind |= g->p2p_done != NULL;
    return g->p2p_done ? IG_DEV(dev_stream_wait)(g->dev, DEV_STREAM_MAIN, g->p2p_done) : IG_OK;
}

/* A step behind the transfers ends in host waits (its logits' copies, the
 * step's sync) that a stopped peer holds up forever: NCCL's kernels spin,
 * the transfer stream with them, the main stream behind it. The step's
 * compute counts against the limit too: far under its default of 600 s. */
bool IG_DEV(gpu_kv_p2p_watch)(struct gpu_backend *g)
{
    bool behind = g->p2p_behind;
    g->p2p_behind = false;
    return behind && gpu_p2p_wait_begin(g->p2p, "a step behind the transfers");
}

int IG_DEV(gpu_kv_p2p_progress)(struct backend *b)
{
    return IG_DEV(dev_streams_run)(((struct gpu_backend *)b)->dev);
}

/* The transfers queued are done before the pool they read and write goes. */
void IG_DEV(gpu_kv_p2p_close)(struct gpu_backend *g)
{
    if (g->p2p_done)
        (void)IG_DEV(dev_event_sync)(g->dev, g->p2p_done);
    IG_DEV(dev_event_destroy)(g->dev, g->p2p_done);
    IG_DEV(dev_event_destroy)(g->dev, g->p2p_main);
    g->p2p_done = g->p2p_main = NULL;
}

/* A recurrent layer l's state in slot `slot`: its bytes in the pool. */
static unsigned char *state_of(const struct gpu_backend *g, int64_t slot, int64_t l)
{
    const struct kv_layer_mem *L = &g->base.kv_mem->layers[l];
    IG_ASSERT(L->kind == KV_RECURRENT && slot >= 0 && slot < g->n_states);
    return g->layers[l].state + (size_t)slot * L->state_bytes;
}

/* Layer l's state in slot `slot`, whole, in a group of its own to or from
 * peer: ordered by the stream as a layer's blocks are (queue_group). */
static int state_group(struct backend *b, struct gpu_p2p *p, int peer, bool send, int64_t slot,
                       int64_t l)
{
    struct gpu_backend *g = (struct gpu_backend *)b;
    struct p2p_group *grp = group_new(p, peer, send, 1);
    if (!grp)
        return IG_E_NOMEM;
    group_add(grp, state_of(g, slot, l), b->kv_mem->layers[l].state_bytes);
    return queue_group(g, grp);
}

int IG_DEV(gpu_kv_send_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                              int64_t l)
{
    return state_group(b, p, peer, true, slot, l);
}

int IG_DEV(gpu_kv_recv_state)(struct backend *b, struct gpu_p2p *p, int peer, int64_t slot,
                              int64_t l)
{
    return state_group(b, p, peer, false, slot, l);
}
