/* emu/smem.cc: the emulator's shared memory and cp.async.
 *
 * Each __shared__ declaration (and the dynamic area) of a block is its own
 * exact-size heap buffer, so ASan reports an overrun, filled with 0xff bytes
 * (a NaN in bf16/f16/f32) as fresh shared memory holds garbage. A per-byte
 * shadow records who last wrote each byte, at which tick of its clock, and
 * who read it since (up to EMU_READERS agents inline, a vector clock
 * beyond): a read not ordered after the last write by happens-before, or a
 * write not ordered after the last write and every read since, is a race
 * (FastTrack's epochs; the vector clocks and what orders them are
 * emu/sync.cc's); reading a byte never written, or one a cp.async or TMA
 * load is still in flight to, is a fault, as is writing a byte a TMA store
 * still reads, or a TMA load over st.shared bytes whose writer did not
 * execute fence.proxy.async after them.
 * cp.async copies land at the wait that covers them: a missing wait reads
 * stale data and is reported. Each write also records how many
 * fence.proxy.async its thread had executed, for wgmma's check that the
 * writer fenced since (emu/wgmma.cc). Covered by tests/emu/test_emu_sched.cc
 * and tests/emu/test_emu_wgmma.cc. */
#include "emu/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest shared memory a block may have (sm_90: 227 KiB). */
#define EMU_MAX_SMEM (227u * 1024u)
/* What a block may have, static and dynamic together, unless its launch
 * raised the limit (ig_emu_next_launch_smem_optin): cudaDevAttrMaxShared-
 * MemoryPerBlock, 48 KiB on every GPU since sm_20; past it a launch fails. */
#define EMU_DEFAULT_SMEM (48u * 1024u)

/* Buffers of blocks that ended, kept for the next block or launch with an
 * array of the same size: a fresh shadow (72 bytes a byte) came from mmap
 * every block, and its page faults were a tenth of the emulated tests' time.
 * Each buffer keeps its exact size, so ASan still sees an overrun. */
#define EMU_SMEM_SPARE 16
static struct emu_smem emu_smem_spare[EMU_SMEM_SPARE]; /* plain globals: LSan's roots */
static size_t emu_smem_nspare;

static void emu_smem_spare_drop(size_t i)
{
    memmove(&emu_smem_spare[i], &emu_smem_spare[i + 1],
            (emu_smem_nspare - i - 1) * sizeof emu_smem_spare[0]);
    emu_smem_nspare--;
}

static int emu_smem_reuse(struct emu_smem *s)
{
    for (size_t i = 0; i < emu_smem_nspare; i++)
        if (emu_smem_spare[i].bytes == s->bytes) {
            s->data = emu_smem_spare[i].data;
            s->shadow = emu_smem_spare[i].shadow;
            s->epoch = emu_smem_spare[i].epoch;
            emu_smem_spare_drop(i);
            return 1;
        }
    return 0;
}

static struct emu_smem *emu_smem_add(struct emu_block *b, const void *key, size_t bytes)
{
    if (b->smem_total + bytes > EMU_MAX_SMEM) {
        emu_fault("shared memory of the block exceeds %u bytes (%zu + %zu)", EMU_MAX_SMEM,
                  b->smem_total, bytes);
        return NULL;
    }
    /* a static declaration (key) past the default with the dynamic area
     * under it: the launch needed the opt-in for the two together */
    const size_t dyn = b->dyn ? b->smem.front().bytes : 0;
    if (key && !emu.smem_optin && dyn <= EMU_DEFAULT_SMEM &&
        b->smem_total + bytes > EMU_DEFAULT_SMEM) {
        emu_fault("static (%zu) and dynamic (%zu) shared memory past %u bytes without "
                  "cudaFuncAttributeMaxDynamicSharedMemorySize raised (IG_SMEM_OPTIN): the "
                  "launch fails on a GPU", b->smem_total - dyn + bytes, dyn, EMU_DEFAULT_SMEM);
        return NULL;
    }
    struct emu_smem s;
    s.key = key;
    s.bytes = bytes;
    if (!emu_smem_reuse(&s)) {
        void *data = NULL;
        if (posix_memalign(&data, 128, bytes ? bytes : 1)) {
            emu_fault("cannot allocate %zu bytes of shared memory", bytes);
            return NULL;
        }
        s.data = (unsigned char *)data;
        s.shadow = (struct emu_shadow *)malloc((bytes ? bytes : 1) * sizeof *s.shadow);
        if (!s.shadow) {
            free(data);
            emu_fault("cannot allocate the shadow of %zu bytes of shared memory", bytes);
            return NULL;
        }
        memset(s.shadow, 0, (bytes ? bytes : 1) * sizeof *s.shadow); /* epoch 0 */
        s.epoch = 0;
    }
    if (++s.epoch == 0) { /* wrapped: entries of 65536 blocks ago would look fresh */
        memset(s.shadow, 0, (bytes ? bytes : 1) * sizeof *s.shadow);
        s.epoch = 1;
    }
    memset(s.data, 0xff, bytes);
    b->smem.push_back(s);
    b->smem_total += bytes;
    return &b->smem.back();
}

int emu_smem_alloc_dynamic(struct emu_block *b, size_t bytes)
{
    b->dyn = NULL;
    if (!bytes)
        return 0;
    struct emu_smem *s = emu_smem_add(b, NULL, bytes);
    if (!s)
        return -1;
    b->dyn = s->data;
    return 0;
}

void emu_smem_free_all(struct emu_block *b)
{
    for (auto &s : b->smem) {
        if (emu_smem_nspare == EMU_SMEM_SPARE) { /* the oldest goes */
            free(emu_smem_spare[0].data);
            free(emu_smem_spare[0].shadow);
            emu_smem_spare_drop(0);
        }
        emu_smem_spare[emu_smem_nspare++] = s;
    }
    b->smem.clear();
    b->smem_total = 0;
    b->dyn = NULL;
    b->readers.clear();
}

const struct emu_smem *emu_dyn_smem(const char *what)
{
    if (!emu.blk->dyn)
        emu_fail("%s without dynamic shared memory (the launch gave none)", what);
    return emu_smem_find(emu.blk->dyn, 1, what);
}

void *ig_emu_static_shared(const void *key, size_t bytes)
{
    struct emu_block *b = emu.blk;
    for (auto &s : b->smem) {
        if (s.key != key)
            continue;
        if (s.bytes != bytes)
            emu_fail("static shared declaration seen with %zu and %zu bytes", s.bytes, bytes);
        return s.data;
    }
    struct emu_smem *s = emu_smem_add(b, key, bytes);
    if (!s)
        emu_fail("%s", "shared memory allocation failed");
    return s->data;
}

void *ig_emu_dynamic_shared(void)
{
    if (!emu.blk->dyn)
        emu_fail("%s", "uses dynamic shared memory but the launch gave none");
    return emu.blk->dyn;
}

/* ---- the shadow ----------------------------------------------------------- */

EMU_NO_SANITIZE struct emu_smem *emu_smem_find(const void *p, size_t n, const char *what)
{
    const unsigned char *c = (const unsigned char *)p;
    for (auto &s : emu.blk->smem) {
        if (c >= s.data && c < s.data + s.bytes) {
            if ((size_t)(s.data + s.bytes - c) < n)
                emu_fail("%s of %zu bytes at shared offset %zu overruns its %zu-byte array", what,
                         n, (size_t)(c - s.data), s.bytes);
            return &s;
        }
    }
    emu_fail("%s: address %p is not in this block's shared memory", what, p);
}

/* How the report names an agent. */
static const char *emu_agent_name(int who, char *buf, size_t size)
{
    const struct emu_block *b = emu.blk;
    if (who < (int)b->n)
        snprintf(buf, size, "thread %d", who);
    else if (who == (int)emu_agent_tma(b))
        snprintf(buf, size, "the TMA unit");
    else
        snprintf(buf, size, "warpgroup %d's wgmma", who - (int)b->n);
    return buf;
}

/* Whether an access by `who` at tick clk happened before one with clock vc. */
EMU_NO_SANITIZE static inline int emu_hb(int who, uint32_t clk, const uint32_t *vc)
{
    return clk <= vc[who];
}

/* Records a read by who at its tick in vc: readers ordered before it are
 * dropped (a later write racing them races this read too), the rest kept;
 * past EMU_READERS they move to a vector clock of their own. */
EMU_NO_SANITIZE static void emu_note_read(struct emu_shadow *h, unsigned who, const uint32_t *vc)
{
    const uint32_t clk = vc[who];
    struct emu_block *b = emu.blk;
    if (h->r_more) {
        std::vector<uint32_t> &r = b->readers[h->r_more - 1];
        if (r[who] < clk)
            r[who] = clk;
        return;
    }
    int k = 0;
    for (int i = 0; i < h->n_r; i++) {
        const struct emu_reader *e = &h->r[i];
        if (e->who == (int)who || emu_hb(e->who, e->clk, vc))
            continue;
        h->r[k++] = *e;
    }
    if (k < EMU_READERS) {
        h->r[k].who = (int16_t)who;
        h->r[k].clk = clk;
        h->n_r = (uint8_t)(k + 1);
        return;
    }
    b->readers.emplace_back(b->n_agents, 0u);
    std::vector<uint32_t> &r = b->readers.back();
    for (int i = 0; i < k; i++)
        r[(unsigned)h->r[i].who] = h->r[i].clk;
    r[who] = clk;
    h->n_r = 0;
    h->r_more = (uint32_t)b->readers.size();
}

EMU_NO_SANITIZE void emu_smem_check_read(unsigned who, const uint32_t *vc, const void *p, size_t n,
                         const char *what)
{
    struct emu_smem *s = emu_smem_find(p, n, what);
    size_t off = (size_t)((const unsigned char *)p - s->data);
    char name[48];
    for (size_t i = off; i < off + n; i++) {
        struct emu_shadow *h = emu_shadow_at(s, i);
        if (h->pending)
            emu_fail("%s reads shared offset %zu while thread %d's %s to it is still in "
                     "flight (missing cp.async.wait_group or mbarrier wait?)", what, i,
                     h->pender, h->w_async ? "TMA load" : "cp.async");
        if (!h->w_clk)
            emu_fail("%s reads shared offset %zu, never written (uninitialised, or a race "
                     "with a write made later)", what, i);
        if (h->writer != (int)who && !emu_hb(h->writer, h->w_clk, vc))
            emu_fail("race: %s reads shared offset %zu that %s wrote with no happens-before "
                     "to this read (a missing barrier, mbarrier wait or fence?)", what, i,
                     emu_agent_name(h->writer, name, sizeof name));
        emu_note_read(h, who, vc);
    }
}

EMU_NO_SANITIZE void emu_smem_check_write(unsigned who, const uint32_t *vc, const void *p, size_t n,
                          const char *what, int async)
{
    struct emu_smem *s = emu_smem_find(p, n, what);
    size_t off = (size_t)((const unsigned char *)p - s->data);
    struct emu_block *b = emu.blk;
    const uint32_t fences = who < b->n ? (*b->threads)[who].proxy_fences : 0;
    char name[48];
    for (size_t i = off; i < off + n; i++) {
        struct emu_shadow *h = emu_shadow_at(s, i);
        if (h->pending)
            emu_fail("%s writes shared offset %zu while thread %d's %s to it is in flight",
                     what, i, h->pender, h->w_async ? "TMA load" : "cp.async");
        if (h->reading)
            emu_fail("%s writes shared offset %zu that a TMA store still reads (missing "
                     "cp.async.bulk.wait_group.read?)", what, i);
        if (h->w_clk && h->writer != (int)who && !emu_hb(h->writer, h->w_clk, vc))
            emu_fail("race: %s writes shared offset %zu that %s wrote with no happens-before "
                     "to this write", what, i, emu_agent_name(h->writer, name, sizeof name));
        if (async && h->w_clk && !h->w_async && h->writer < (int)b->n &&
            h->w_fences == (*b->threads)[(unsigned)h->writer].proxy_fences)
            emu_fail("%s (async proxy) writes shared offset %zu over thread %d's st.shared "
                     "with no fence.proxy.async after it", what, i, h->writer);
        if (h->r_more) {
            const std::vector<uint32_t> &r = b->readers[h->r_more - 1];
            for (unsigned a = 0; a < b->n_agents; a++)
                if (a != who && r[a] && r[a] > vc[a])
                    emu_fail("race: %s writes shared offset %zu that %s read with no "
                             "happens-before to this write", what, i,
                             emu_agent_name((int)a, name, sizeof name));
        }
        for (int k = 0; k < h->n_r; k++)
            if (h->r[k].who != (int)who && !emu_hb(h->r[k].who, h->r[k].clk, vc))
                emu_fail("race: %s writes shared offset %zu that %s read with no "
                         "happens-before to this write", what, i,
                         emu_agent_name(h->r[k].who, name, sizeof name));
        h->w_clk = vc[who];
        h->writer = (int16_t)who;
        h->w_fences = fences;
        h->w_async = (uint8_t)(async != 0);
        h->n_r = 0;
        h->r_more = 0;
    }
}

void emu_smem_thread_read(struct emu_thread *t, const void *p, size_t n, const char *what)
{
    emu_smem_check_read(t->tid, t->vc.data(), p, n, what);
}

void emu_smem_thread_write(struct emu_thread *t, const void *p, size_t n, const char *what)
{
    emu_smem_check_write(t->tid, t->vc.data(), p, n, what, 0);
}

void ig_emu_shared_read(const void *p, size_t n)
{
    emu_smem_thread_read(emu.cur, p, n, "shared load");
}

void ig_emu_shared_write(const void *p, size_t n)
{
    emu_smem_thread_write(emu.cur, p, n, "shared store");
}

/* ---- cp.async ------------------------------------------------------------- */

void ig_emu_cp_async(void *dst, const void *src, uint32_t size, uint32_t src_size)
{
    struct emu_thread *t = emu.cur;
    if (size != 16 && size != 8 && size != 4)
        emu_fail("cp.async of %u bytes (only 4, 8 and 16 exist)", size);
    if (((uintptr_t)dst | (uintptr_t)src) & (size - 1))
        emu_fail("cp.async of %u bytes with a misaligned address (dst %p, src %p)", size, dst,
                 src);
    if (src_size != 0 && src_size != size)
        emu_fail("cp.async src_size %u (only 0 and %u are used)", src_size, size);
    /* The copy may happen any time until its wait: check the hazards now. */
    emu_smem_thread_write(t, dst, size, "cp.async");
    struct emu_smem *s = emu_smem_find(dst, size, "cp.async");
    size_t off = (size_t)((unsigned char *)dst - s->data);
    for (size_t i = off; i < off + size; i++) {
        s->shadow[i].pending++;
        s->shadow[i].pender = (int16_t)t->tid;
    }
    t->uncommitted.push_back({(unsigned char *)dst, (const unsigned char *)src, src_size, size});
}

void ig_emu_cp_async16(void *dst, const void *src, uint32_t src_size)
{
    ig_emu_cp_async(dst, src, 16u, src_size);
}

void ig_emu_cp_async_commit(void)
{
    struct emu_thread *t = emu.cur;
    t->groups.push_back(t->uncommitted);
    t->uncommitted.clear();
}

void emu_cp_async_complete(struct emu_thread *t, size_t keep)
{
    while (t->groups.size() > keep) {
        for (const emu_copy &c : t->groups.front()) {
            struct emu_smem *s = emu_smem_find(c.dst, c.size, "cp.async");
            size_t off = (size_t)(c.dst - s->data);
            for (size_t i = off; i < off + c.size; i++)
                s->shadow[i].pending--;
            emu_smem_thread_write(t, c.dst, c.size, "cp.async completion");
            if (c.src_size)
                memcpy(c.dst, c.src, c.src_size); /* ASan checks the global read here */
            memset(c.dst + c.src_size, 0, c.size - c.src_size);
        }
        t->groups.pop_front();
    }
}

void ig_emu_cp_async_wait(int n)
{
    emu_cp_async_complete(emu.cur, n < 0 ? 0 : (size_t)n);
}
