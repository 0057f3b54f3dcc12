/* emu/wgmma.cc: Hopper's warpgroup MMA under the emulator: the hooks of
 * devkit/wgmma.cuh (wgmma.mma_async m64nNk16 with f32 accumulators, its
 * fence, commit_group and wait_group, the async proxy fence, shared-memory
 * addresses) and what a warpgroup collective does once its 128 threads have
 * arrived (the arrival itself is emu/sched.cc's).
 *
 * An MMA is recorded at issue (descriptors, flags, each thread's d pointer,
 * A registers copied); its operands are read from shared memory and its
 * results written through the d pointers at the wait_group that completes
 * its group, so early reads of d and early overwrites of operands give wrong
 * numbers as they may on the device. Layouts, descriptor bits and swizzles:
 * docs/wgmma.md (PTX ISA 9.7.15.5.1). Products of bf16/f16 are exact in
 * double; each sum is taken in k order and rounded to f32 once.
 *
 * Shared addresses are the offset in the dynamic area plus a per-launch base
 * that is a multiple of 16 but never of 1024 (emu.smem_base), and swizzles
 * apply to those addresses, so a kernel that does not align its swizzled
 * tiles reads the wrong bytes, as on the device.
 * The faults, besides shapes and descriptors: an MMA with no wgmma.fence
 * since the last wait_group whose accumulators or A registers another
 * instruction wrote since a wgmma last used them (or that no wgmma has used:
 * the first MMA needs a fence); a thread writing an MMA's accumulators or
 * A registers between its issue and its completion; operands that, at issue or at
 * completion, are still in flight from cp.async or TMA, never written,
 * written with no happens-before to the MMA (its reads are the warpgroup's
 * wgmma agent's, ordered after what all 128 issuing threads are ordered
 * after; every thread of the warpgroup is ordered after them once the
 * wait_group that completes it returns), or written (st.shared or
 * cp.async) by a thread that executed no fence.proxy.async afterwards (each
 * thread counts its proxy fences and each written byte keeps its writer's
 * count; the TMA's writes are the async proxy's own and need none).
 * Covered by tests/emu/test_emu_wgmma.cc. */
#include "core/half.h"
#include "emu/internal.h"

#include <string.h>

#define EMU_WARPGROUP 128u

static const char *emu_wg_name(const struct emu_wgcoll *c)
{
    static const char *names[] = {"?", "wgmma.mma_async", "wgmma.fence", "wgmma.commit_group",
                                  "wgmma.wait_group", "setmaxnreg"};
    return names[c->op >= EMU_WG_MMA && c->op <= EMU_WG_SETMAXNREG ? c->op : 0];
}

/* ---- hooks ---------------------------------------------------------------- */

void ig_emu_wgmma(int kind, int n, float *d, uint64_t a_desc, const uint32_t *a_regs,
                  uint64_t b_desc, int accumulate, int trans_a, int trans_b)
{
    struct emu_wgcoll c = {};
    c.op = EMU_WG_MMA;
    c.kind = kind;
    c.n = n;
    c.d = d;
    c.a_desc = a_regs ? 0 : a_desc;
    c.a_in_regs = a_regs != NULL;
    c.a_ptr = a_regs;
    if (a_regs)
        memcpy(c.a, a_regs, sizeof c.a);
    c.b_desc = b_desc;
    c.accumulate = accumulate != 0;
    c.trans_a = a_regs ? 0 : trans_a;
    c.trans_b = trans_b;
    emu_wg_collective(&c);
}

static void emu_wg_simple(int op, int n)
{
    struct emu_wgcoll c = {};
    c.op = op;
    c.n = n;
    emu_wg_collective(&c);
}

void ig_emu_wgmma_fence(void) { emu_wg_simple(EMU_WG_FENCE, 0); }
void ig_emu_wgmma_commit(void) { emu_wg_simple(EMU_WG_COMMIT, 0); }
void ig_emu_wgmma_wait(int n) { emu_wg_simple(EMU_WG_WAIT, n); }

/* Makes this thread's shared-memory writes so far visible to wgmma. */
void ig_emu_fence_proxy_async(void) { emu.cur->proxy_fences++; }

uint32_t ig_emu_shared_address(const void *p)
{
    const struct emu_smem *s = emu_dyn_smem("shared address");
    const unsigned char *c = (const unsigned char *)p;
    if (c < s->data || c >= s->data + s->bytes)
        emu_fail("shared address of %p, which is not in the block's dynamic shared memory "
                 "(only that has descriptor addresses here)", p);
    return emu.smem_base + (uint32_t)(c - s->data);
}

/* ---- operands from shared memory ------------------------------------------ */

/* A decoded matrix descriptor (PTX ISA 9.7.15.5.1.2.2). */
struct emu_desc {
    uint32_t start, lbo, sbo; /* bytes */
    int swizzle;              /* ig_wgmma_swizzle: 0 none, 1 128B, 2 64B, 3 32B */
};

EMU_NO_SANITIZE static struct emu_desc emu_desc_decode(uint64_t v, char which)
{
    struct emu_desc d;
    d.start = (uint32_t)(v & 0x3fff) << 4;
    d.lbo = (uint32_t)((v >> 16) & 0x3fff) << 4;
    d.sbo = (uint32_t)((v >> 32) & 0x3fff) << 4;
    d.swizzle = (int)(v >> 62);
    unsigned base = (unsigned)((v >> 49) & 7);
    if (base)
        emu_fail("wgmma %c descriptor with base offset %u: only 0 is emulated (swizzled "
                 "tiles must start their pattern at a multiple of its repeat)", which, base);
    return d;
}

/* Swizzle width in bytes of a mode (the row length of its pattern). */
EMU_NO_SANITIZE static uint32_t emu_swizzle_bytes(int mode)
{
    return mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 16;
}

/* Byte address of element (x, k) of a 16-bit operand: x runs along M (A) or
 * N (B), k along K; mn_major = the transposed layout. docs/wgmma.md. */
EMU_NO_SANITIZE static uint32_t emu_elem_addr(const struct emu_desc *d, int mn_major, uint32_t x, uint32_t k)
{
    uint32_t a;
    if (d->swizzle == 0) {
        /* Core matrices of 8 rows x 16 bytes. */
        if (mn_major)
            a = d->start + (x % 8) * 2 + (x / 8) * d->sbo + (k % 8) * 16 + (k / 8) * d->lbo;
        else
            a = d->start + (x % 8) * 16 + (x / 8) * d->sbo + (k % 8) * 2 + (k / 8) * d->lbo;
        return a;
    }
    uint32_t w = emu_swizzle_bytes(d->swizzle);
    if (mn_major)
        a = d->start + (x % (w / 2)) * 2 + (x / (w / 2)) * d->lbo + (k % 8) * w + (k / 8) * d->sbo;
    else
        a = d->start + (x % 8) * w + (x / 8) * d->sbo + k * 2;
    /* 16-byte chunk bits [4, 4+b) ^= row bits [7, 7+b), b = log2(w / 16). */
    uint32_t mask = w / 16 - 1;
    return a ^ (((a >> 7) & mask) << 4);
}

/* One 16-bit operand element at a shared address, checked against the
 * dynamic area's bounds and the shadow (uninitialised, cp.async or TMA in
 * flight, races, no proxy fence) as a read by the warpgroup's wgmma agent
 * with clock vc; at_issue says which check this is in messages. */
EMU_NO_SANITIZE static float emu_read_half(int kind, uint32_t addr, const struct emu_smem *s, unsigned who,
                           const uint32_t *vc, char which, int at_issue)
{
    const uint32_t base = emu.smem_base;
    if (addr < base || (size_t)(addr - base) + 2 > s->bytes)
        emu_fail("wgmma reads %c at shared address %u, outside the dynamic shared memory at "
                 "[%u, %zu) (wrong descriptor, or a swizzled tile not aligned to its pattern?)",
                 which, addr, base, base + s->bytes);
    const uint32_t off = addr - base;
    const unsigned char *p = s->data + off;
    static const char *what[2][2] = {{"wgmma (A operand)", "wgmma (B operand)"},
                                     {"wgmma issue (A operand)", "wgmma issue (B operand)"}};
    emu_smem_check_read(who, vc, p, 2, what[at_issue != 0][which != 'A']);
    for (uint32_t i = off; i < off + 2; i++) {
        const struct emu_shadow *h = &s->shadow[i];
        /* The async proxy's own writes (TMA) need no proxy fence. */
        if (!h->w_async && h->writer < (int)emu.blk->n &&
            h->w_fences == (*emu.blk->threads)[(unsigned)h->writer].proxy_fences)
            emu_fail("%s reads shared offset %u, which thread %d wrote (st.shared or cp.async) "
                     "without a fence.proxy.async after it (missing ig_fence_proxy_async before "
                     "the barrier?)", what[at_issue != 0][which != 'A'], i, h->writer);
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return kind == IG_EMU_WGMMA_BF16 ? ig_bf16_to_f32(h) : ig_f16_to_f32(h);
}

EMU_NO_SANITIZE static float emu_reg_half(int kind, uint32_t reg, int hi)
{
    uint16_t h = (uint16_t)(reg >> (hi ? 16 : 0));
    return kind == IG_EMU_WGMMA_BF16 ? ig_bf16_to_f32(h) : ig_f16_to_f32(h);
}

/* An MMA's A and B (64 x 16, 16 x N) with every shared-memory check, at its
 * issue or its completion, read by agent `who` (the warpgroup's wgmma) with
 * the clock of the MMA's issue. */
EMU_NO_SANITIZE static void emu_wgmma_operands(const struct emu_wgmma_op *op, unsigned who, int at_issue,
                               float (*A)[16], float (*B)[256])
{
    const struct emu_smem *s = emu_dyn_smem("wgmma");
    const uint32_t *vc = op->vc.data();
    if (op->a_in_regs) {
        /* Per warp w its rows 16w..16w+15 in the mma.m16n8k16 A layout. */
        for (unsigned l = 0; l < EMU_WARPGROUP; l++) {
            unsigned row = 16 * (l / 32) + (l % 32) / 4, t = l % 4;
            for (unsigned e = 0; e < 8; e++)
                A[row + 8 * ((e / 2) % 2)][2 * t + e % 2 + 8 * (e / 4)] =
                    emu_reg_half(op->kind, op->a[l][e / 2], e % 2);
        }
    } else {
        struct emu_desc da = emu_desc_decode(op->a_desc, 'A');
        for (uint32_t m = 0; m < 64; m++)
            for (uint32_t k = 0; k < 16; k++)
                A[m][k] = emu_read_half(op->kind, emu_elem_addr(&da, op->trans_a, m, k), s, who,
                                        vc, 'A', at_issue);
    }
    struct emu_desc db = emu_desc_decode(op->b_desc, 'B');
    for (uint32_t k = 0; k < 16; k++)
        for (uint32_t nn = 0; nn < (uint32_t)op->n; nn++)
            B[k][nn] = emu_read_half(op->kind, emu_elem_addr(&db, op->trans_b, nn, k), s, who,
                                     vc, 'B', at_issue);
}

/* The products of emu_wgmma_run on the emulator's copies (dd: 128 threads'
 * n/2 accumulators), hence EMU_NO_SANITIZE. */
EMU_NO_SANITIZE static void emu_wgmma_math(const struct emu_wgmma_op *op, const float (*A)[16],
                                       const float (*B)[256], float *dd)
{
    const int h = op->n / 2;
    /* Thread l of warp w: d[4j + e] = D[16w + g + 8(e/2)][8j + 2t + e%2]. */
    for (unsigned l = 0; l < EMU_WARPGROUP; l++) {
        float *d = dd + (size_t)l * (size_t)h;
        unsigned g = (l % 32) / 4, t = l % 4;
        for (int i = 0; i < h; i++) {
            unsigned row = 16 * (l / 32) + g + 8 * ((i % 4) / 2);
            unsigned col = 8 * (i / 4) + 2 * t + i % 2;
            double sum = op->accumulate ? (double)d[i] : 0.0;
            for (unsigned k = 0; k < 16; k++)
                sum += (double)A[row][k] * (double)B[k][col];
            d[i] = (float)sum;
        }
    }
}

/* One MMA at its completion: operands read now, D written (the copies to and
 * from the threads' registers stay ASan-checked). */
static void emu_wgmma_run(const struct emu_wgmma_op *op, unsigned who)
{
    static float A[64][16], B[16][256], D[EMU_WARPGROUP * 128];
    emu_wgmma_operands(op, who, 0, A, B);
    const size_t h = (size_t)(op->n / 2);
    for (unsigned l = 0; l < EMU_WARPGROUP; l++)
        memcpy(&D[l * h], op->d[l], h * 4);
    emu_wgmma_math(op, A, B, D);
    for (unsigned l = 0; l < EMU_WARPGROUP; l++)
        memcpy(op->d[l], &D[l * h], h * 4);
}

/* ---- registers a wgmma knows ----------------------------------------------- */

/* The record of these registers (same pointers and size in every thread). */
static struct emu_wg_regs *emu_known_find(struct emu_wg *wg, const void *const *p, int words)
{
    for (auto &r : wg->known)
        if (r.words == words && !memcmp(r.p, p, sizeof r.p))
            return &r;
    return NULL;
}

/* Records what the registers hold now (each thread's p[l], words of them). */
static void emu_known_set(struct emu_wg *wg, const void *const *p, int words)
{
    struct emu_wg_regs *r = emu_known_find(wg, p, words);
    if (!r) {
        wg->known.emplace_back();
        r = &wg->known.back();
        r->words = words;
        memcpy(r->p, p, sizeof r->p);
        r->v.resize((size_t)EMU_WARPGROUP * (size_t)words);
    }
    for (unsigned l = 0; l < EMU_WARPGROUP; l++)
        memcpy(&r->v[(size_t)l * (size_t)words], p[l], (size_t)words * 4);
}

/* The first thread whose registers differ from the record; 128 when none. */
static unsigned emu_known_changed(const struct emu_wg_regs *r)
{
    for (unsigned l = 0; l < EMU_WARPGROUP; l++)
        if (memcmp(&r->v[(size_t)l * (size_t)r->words], r->p[l], (size_t)r->words * 4))
            return l;
    return EMU_WARPGROUP;
}

/* An MMA issued with no wgmma.fence since the last wait_group: the ISA
 * (9.7.15.7.1) asks for a fence between any other access to its accumulators
 * or A registers and the MMA, except between MMAs of the same shape on the
 * same accumulators. Writes are what can be seen here: the registers must
 * hold what a wgmma last saw in them (registers no wgmma has used count as
 * written). Reads by the thread in between cannot be seen. */
static void emu_wgmma_check_unfenced(struct emu_wg *wg, const void *const *p, int words,
                                     const char *what)
{
    if (!wg->ever_fenced)
        emu_fail("wgmma.mma_async without a wgmma.fence before the warpgroup's first one");
    const struct emu_wg_regs *r = emu_known_find(wg, p, words);
    if (!r)
        emu_fail("wgmma.mma_async without a wgmma.fence since the last wait_group, on %s no "
                 "wgmma used before (a fence must order the instructions that set them)", what);
    unsigned l = emu_known_changed(r);
    if (l < EMU_WARPGROUP)
        emu_fail("wgmma.mma_async without a wgmma.fence since the last wait_group, on %s that "
                 "thread %u of the warpgroup wrote after a wgmma last used them", what, l);
}

/* ---- completion ----------------------------------------------------------- */

/* Every MMA of the warpgroup not yet completed, oldest first. */
template <class F> static void emu_wg_each_pending(struct emu_wg *wg, F &&f)
{
    for (auto &grp : wg->groups)
        for (auto &op : grp)
            f(op);
    for (auto &op : wg->uncommitted)
        f(op);
}

/* Completes op, the oldest pending MMA: its accumulators must be as the
 * thread left them at issue (or as an earlier MMA on them completed), and
 * its A registers as at issue (the device may read them until completion). */
static void emu_wgmma_complete(struct emu_wg *wg, struct emu_wgmma_op *op, unsigned who)
{
    const int words = op->n / 2;
    for (unsigned l = 0; l < EMU_WARPGROUP; l++) {
        const uint32_t *want = &op->d_expect[(size_t)l * (size_t)words];
        for (int i = 0; i < words; i++) {
            uint32_t got;
            memcpy(&got, &op->d[l][i], 4);
            if (got != want[i])
                emu_fail("accumulator written while its wgmma was in flight: thread %u of the "
                         "warpgroup changed d[%d] between the wgmma.mma_async and the "
                         "wgmma.wait_group that completes it", l, i);
        }
        if (op->a_in_regs && memcmp(op->a_ptr[l], op->a[l], sizeof op->a[l]) != 0)
            emu_fail("A registers written while their wgmma was in flight: thread %u of the "
                     "warpgroup changed them between the wgmma.mma_async and the "
                     "wgmma.wait_group that completes it", l);
    }
    emu_wgmma_run(op, who);
    const void *p[EMU_WARPGROUP];
    for (unsigned l = 0; l < EMU_WARPGROUP; l++)
        p[l] = op->d[l];
    emu_known_set(wg, p, words);
    /* Later MMAs on the same registers start from these results. */
    emu_wg_each_pending(wg, [&](emu_wgmma_op &o) {
        if (&o == op)
            return;
        int w = o.n / 2 < words ? o.n / 2 : words;
        for (unsigned l = 0; l < EMU_WARPGROUP; l++)
            if (o.d[l] == op->d[l])
                memcpy(&o.d_expect[(size_t)l * (size_t)(o.n / 2)], op->d[l], (size_t)w * 4);
    });
}

/* ---- the warpgroup collective once all 128 threads are there --------------- */

static int emu_wg_same(const struct emu_wgcoll *a, const struct emu_wgcoll *b)
{
    if (a->op != b->op || a->n != b->n)
        return 0;
    if (a->op != EMU_WG_MMA && a->op != EMU_WG_SETMAXNREG)
        return 1;
    if (a->op == EMU_WG_SETMAXNREG)
        return a->kind == b->kind && a->launch_regs == b->launch_regs;
    return a->kind == b->kind && a->accumulate == b->accumulate && a->trans_a == b->trans_a &&
           a->trans_b == b->trans_b && a->a_in_regs == b->a_in_regs && a->a_desc == b->a_desc &&
           a->b_desc == b->b_desc;
}

int emu_warpgroup_compute(struct emu_block *b, unsigned g)
{
    struct emu_thread *t0 = &(*b->threads)[g * EMU_WARPGROUP];
    const struct emu_wgcoll *c0 = &t0->wgc;
    for (unsigned l = 1; l < EMU_WARPGROUP; l++) {
        const struct emu_wgcoll *c = &t0[l].wgc;
        if (!emu_wg_same(c, c0))
            emu_fail("warpgroup %u: thread %u is in %s (n %d) while thread %u is in %s (n %d) "
                     "(a wgmma collective must be the same instruction, shape, descriptors and "
                     "flags in all 128 threads)",
                     g, t0[l].tid, emu_wg_name(c), c->n, t0->tid, emu_wg_name(c0), c0->n);
    }
    struct emu_wg *wg = &b->wg[g];
    switch (c0->op) {
    case EMU_WG_MMA: {
        if (c0->kind != IG_EMU_WGMMA_BF16 && c0->kind != IG_EMU_WGMMA_F16)
            emu_fail("wgmma of kind %d (only bf16 and f16 are emulated)", c0->kind);
        if (c0->n < 8 || c0->n > 256 || c0->n % 8)
            emu_fail("wgmma m64n%dk16: N must be a multiple of 8 from 8 to 256", c0->n);
        const void *dp[EMU_WARPGROUP], *ap[EMU_WARPGROUP];
        for (unsigned l = 0; l < EMU_WARPGROUP; l++) {
            dp[l] = t0[l].wgc.d;
            ap[l] = t0[l].wgc.a_ptr;
        }
        if (!wg->fenced) {
            emu_wgmma_check_unfenced(wg, dp, c0->n / 2, "accumulators");
            if (c0->a_in_regs)
                emu_wgmma_check_unfenced(wg, ap, 4, "A registers");
        }
        wg->uncommitted.emplace_back();
        struct emu_wgmma_op *op = &wg->uncommitted.back();
        op->kind = c0->kind;
        op->n = c0->n;
        op->accumulate = c0->accumulate;
        op->trans_a = c0->trans_a;
        op->trans_b = c0->trans_b;
        op->a_in_regs = c0->a_in_regs;
        op->a_desc = c0->a_desc;
        op->b_desc = c0->b_desc;
        op->d_expect.resize((size_t)EMU_WARPGROUP * (size_t)(c0->n / 2));
        for (unsigned l = 0; l < EMU_WARPGROUP; l++) {
            op->d[l] = t0[l].wgc.d;
            op->a_ptr[l] = t0[l].wgc.a_ptr;
            memcpy(op->a[l], t0[l].wgc.a, sizeof op->a[l]);
            memcpy(&op->d_expect[(size_t)l * (size_t)(c0->n / 2)], op->d[l],
                   (size_t)(c0->n / 2) * 4);
        }
        emu_known_set(wg, dp, c0->n / 2);
        if (c0->a_in_regs)
            emu_known_set(wg, ap, 4);
        /* Its reads are the warpgroup's wgmma agent's, ordered after what
         * every one of the 128 issuing threads is ordered after (the meet
         * of their clocks: .sync synchronizes a warp, not the warpgroup, so
         * a write by one thread with no barrier to the others is not). */
        const unsigned agent = emu_agent_wgmma(b, g);
        op->vc = t0[0].vc;
        for (unsigned l = 1; l < EMU_WARPGROUP; l++)
            emu_vc_meet(op->vc.data(), t0[l].vc.data(), b->n_agents);
        op->vc[agent] = ++wg->wgmma_clock;
        /* The MMA may read shared memory any time from now to its wait: its
         * operands must be valid already. */
        static float A[64][16], B[16][256];
        emu_wgmma_operands(op, agent, 1, A, B);
        break;
    }
    case EMU_WG_FENCE:
        wg->fenced = wg->ever_fenced = 1;
        break;
    case EMU_WG_COMMIT:
        wg->groups.push_back(std::move(wg->uncommitted));
        wg->uncommitted.clear();
        break;
    case EMU_WG_WAIT: {
        size_t keep = c0->n < 0 ? 0 : (size_t)c0->n;
        const unsigned agent = emu_agent_wgmma(b, g);
        while (wg->groups.size() > keep) {
            for (emu_wgmma_op &op : wg->groups.front()) {
                emu_wgmma_complete(wg, &op, agent);
                /* Its reads happen before the wait returns in every thread. */
                for (unsigned l = 0; l < EMU_WARPGROUP; l++)
                    emu_vc_join(t0[l].vc, op.vc);
            }
            wg->groups.pop_front();
        }
        wg->fenced = 0; /* the thread may now access the registers */
        break;
    }
    case EMU_WG_SETMAXNREG:
        return emu_setmaxnreg(b, g, c0);
    default:
        emu_fail("unknown warpgroup collective %d", c0->op);
    }
    return 1;
}

void emu_wgmma_check_exit(struct emu_thread *t)
{
    struct emu_block *b = emu.blk;
    if (b->n % EMU_WARPGROUP)
        return; /* no warpgroup ever formed */
    const struct emu_wg *wg = &b->wg[t->tid / EMU_WARPGROUP];
    size_t left = wg->uncommitted.size();
    for (auto &grp : wg->groups)
        left += grp.size();
    if (left)
        emu_fail("exits with %zu wgmma not waited for (missing wgmma.commit_group / "
                 "wgmma.wait_group?)", left);
}
