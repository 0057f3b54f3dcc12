/* emu/smem.cc: the emulator's shared memory and cp.async.
 *
 * Each __shared__ declaration (and the dynamic area) of a block is its own
 * exact-size heap buffer, so ASan reports an overrun, filled with 0xff bytes
 * (a NaN in bf16/f16/f32) as fresh shared memory holds garbage. A per-byte
 * shadow records, per barrier epoch, who last wrote and read each byte:
 * a read of a byte another thread wrote since the last barrier, or a write
 * to a byte another thread read or wrote since then, is a race; reading a
 * byte never written, or one a cp.async is still in flight to, is a fault.
 * cp.async copies land at the wait that covers them: a missing wait reads
 * stale data and is reported. Each write also records how many
 * fence.proxy.async its thread had executed, for wgmma's check that the
 * writer fenced since (emu/wgmma.cc). Covered by tests/emu/test_emu_sched.cc
 * and tests/emu/test_emu_wgmma.cc. */
#include "emu/internal.h"

#include <stdlib.h>
#include <string.h>

/* The largest shared memory a block may have (sm_90: 227 KiB). */
#define EMU_MAX_SMEM (227u * 1024u)

static struct emu_smem *emu_smem_add(struct emu_block *b, const void *key, size_t bytes)
{
    if (b->smem_total + bytes > EMU_MAX_SMEM) {
        emu_fault("shared memory of the block exceeds %u bytes (%zu + %zu)", EMU_MAX_SMEM,
                  b->smem_total, bytes);
        return NULL;
    }
    void *data = NULL;
    if (posix_memalign(&data, 128, bytes ? bytes : 1)) {
        emu_fault("cannot allocate %zu bytes of shared memory", bytes);
        return NULL;
    }
    memset(data, 0xff, bytes);
    struct emu_smem s;
    s.key = key;
    s.data = (unsigned char *)data;
    s.bytes = bytes;
    s.shadow = (struct emu_shadow *)calloc(bytes ? bytes : 1, sizeof *s.shadow);
    if (!s.shadow) {
        free(data);
        emu_fault("cannot allocate the shadow of %zu bytes of shared memory", bytes);
        return NULL;
    }
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
        free(s.data);
        free(s.shadow);
    }
    b->smem.clear();
    b->smem_total = 0;
    b->dyn = NULL;
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

struct emu_smem *emu_smem_find(const void *p, size_t n, const char *what)
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

void emu_smem_check_read(unsigned tid, const void *p, size_t n, const char *what)
{
    struct emu_smem *s = emu_smem_find(p, n, what);
    size_t off = (size_t)((const unsigned char *)p - s->data);
    uint32_t e = emu.blk->epoch;
    for (size_t i = off; i < off + n; i++) {
        struct emu_shadow *h = &s->shadow[i];
        if (h->pending)
            emu_fail("%s reads shared offset %zu while thread %d's cp.async to it is still in "
                     "flight (missing cp.async.wait_group?)", what, i, h->pender);
        if (!h->w_epoch)
            emu_fail("%s reads shared offset %zu, never written (uninitialised, or a race "
                     "with a write made later)", what, i);
        if (h->w_epoch == e && h->writer != (int)tid)
            emu_fail("race: %s reads shared offset %zu that thread %d wrote since the last "
                     "barrier", what, i, h->writer);
        if (h->r_epoch != e) {
            h->r_epoch = e;
            h->reader = (int16_t)tid;
        } else if (h->reader != (int)tid) {
            h->reader = EMU_MANY;
        }
    }
}

void emu_smem_check_write(unsigned tid, const void *p, size_t n, const char *what)
{
    struct emu_smem *s = emu_smem_find(p, n, what);
    size_t off = (size_t)((const unsigned char *)p - s->data);
    uint32_t e = emu.blk->epoch;
    uint32_t fences = (*emu.blk->threads)[tid].proxy_fences;
    for (size_t i = off; i < off + n; i++) {
        struct emu_shadow *h = &s->shadow[i];
        if (h->pending)
            emu_fail("%s writes shared offset %zu while thread %d's cp.async to it is in "
                     "flight", what, i, h->pender);
        if (h->w_epoch == e && h->writer != (int)tid)
            emu_fail("race: %s writes shared offset %zu that thread %d wrote since the last "
                     "barrier", what, i, h->writer);
        if (h->r_epoch == e && h->reader != (int)tid)
            emu_fail("race: %s writes shared offset %zu that %s read since the last barrier",
                     what, i, h->reader == EMU_MANY ? "other threads" : "another thread");
        h->w_epoch = e;
        h->writer = (int16_t)tid;
        h->w_fences = fences;
    }
}

void ig_emu_shared_read(const void *p, size_t n)
{
    emu_smem_check_read(emu.cur->tid, p, n, "shared load");
}

void ig_emu_shared_write(const void *p, size_t n)
{
    emu_smem_check_write(emu.cur->tid, p, n, "shared store");
}

/* ---- cp.async ------------------------------------------------------------- */

void ig_emu_cp_async16(void *dst, const void *src, uint32_t src_size)
{
    struct emu_thread *t = emu.cur;
    if (((uintptr_t)dst | (uintptr_t)src) & 15)
        emu_fail("cp.async of 16 bytes with a misaligned address (dst %p, src %p)", dst, src);
    if (src_size != 0 && src_size != 16)
        emu_fail("cp.async src_size %u (only 0 and 16 are used)", src_size);
    /* The copy may happen any time until its wait: check the hazards now. */
    emu_smem_check_write(t->tid, dst, 16, "cp.async");
    struct emu_smem *s = emu_smem_find(dst, 16, "cp.async");
    size_t off = (size_t)((unsigned char *)dst - s->data);
    for (size_t i = off; i < off + 16; i++) {
        s->shadow[i].pending++;
        s->shadow[i].pender = (int16_t)t->tid;
    }
    t->uncommitted.push_back({(unsigned char *)dst, (const unsigned char *)src, src_size});
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
            struct emu_smem *s = emu_smem_find(c.dst, 16, "cp.async");
            size_t off = (size_t)(c.dst - s->data);
            for (size_t i = off; i < off + 16; i++)
                s->shadow[i].pending--;
            emu_smem_check_write(t->tid, c.dst, 16, "cp.async completion");
            if (c.src_size)
                memcpy(c.dst, c.src, c.src_size); /* ASan checks the global read here */
            memset(c.dst + c.src_size, 0, 16 - c.src_size);
        }
        t->groups.pop_front();
    }
}

void ig_emu_cp_async_wait(int n)
{
    emu_cp_async_complete(emu.cur, n < 0 ? 0 : (size_t)n);
}
