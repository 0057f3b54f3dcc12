/* emu/tma.cc: the Tensor Memory Accelerator under the emulator: tensor maps
 * (tiled mode, the checks of cuTensorMapEncodeTiled), loads
 * (cp.async.bulk.tensor global -> shared, completing on an mbarrier with
 * complete_tx), stores (shared -> global in bulk async-groups, with their
 * commit and wait_group[.read]).
 *
 * A load is checked at issue (its box may be written from then on: races
 * with earlier accesses not ordered before the issue, st.shared bytes whose
 * writer has not executed fence.proxy.async since, an mbarrier that is not
 * initialized, fenced for the async proxy and ordered before the issue) and
 * its bytes are marked in flight; it lands only when no thread of the
 * block can run (emu/sched.cc), as late as the ISA allows, so a thread that
 * reads the box without waiting on the right phase of the right mbarrier
 * reads bytes in flight or races the TMA unit's write. The box is laid out
 * row after row (dimension 0 innermost) from the destination, with the
 * swizzle applied to the shared address (16-byte chunk bits 4.. XOR
 * address bits 7..; the same pattern as wgmma's, docs/wgmma.md), elements
 * outside the tensor read as zero. A store reads its box (it must have been
 * written with a proxy fence after the write) and writes only the elements
 * inside the tensor, at its wait_group; its bytes may not be written until
 * then. Covered by tests/emu/test_emu_sync.cc. */
#include "emu/internal.h"

#include <stdio.h>
#include <string.h>

#define EMU_TMA_MAGIC 0x544d4131u /* "TMA1" */

int ig_emu_tma_encode(struct ig_emu_tma_map *m, const void *base, int rank, int elem_bytes,
                      const uint64_t *dim, const uint64_t *stride_bytes, const uint32_t *box,
                      int swizzle)
{
    memset(m, 0, sizeof *m);
    if (rank < 1 || rank > 5 || (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4 &&
                                 elem_bytes != 8)) {
        fprintf(stderr, "emu tensor map: rank %d / element size %d\n", rank, elem_bytes);
        return -1;
    }
    if (!base || ((uintptr_t)base & 15)) {
        fprintf(stderr, "emu tensor map: global address %p is not 16-byte aligned\n", base);
        return -1;
    }
    if (swizzle != 0 && swizzle != 1 && swizzle != 2 && swizzle != 3) {
        fprintf(stderr, "emu tensor map: swizzle mode %d is not emulated\n", swizzle);
        return -1;
    }
    const uint32_t span = swizzle == 3 ? 128 : swizzle == 2 ? 64 : swizzle == 1 ? 32 : 0;
    for (int i = 0; i < rank; i++) {
        if (dim[i] < 1 || dim[i] > ((uint64_t)1 << 32)) {
            fprintf(stderr, "emu tensor map: dimension %d is %llu (1 .. 2^32)\n", i,
                    (unsigned long long)dim[i]);
            return -1;
        }
        if (box[i] < 1 || box[i] > 256) {
            fprintf(stderr, "emu tensor map: box dimension %d is %u (1 .. 256)\n", i, box[i]);
            return -1;
        }
        if (i > 0 && (stride_bytes[i - 1] % 16 || stride_bytes[i - 1] >= ((uint64_t)1 << 40))) {
            fprintf(stderr, "emu tensor map: stride %d is %llu bytes (a multiple of 16 below "
                    "2^40)\n", i, (unsigned long long)stride_bytes[i - 1]);
            return -1;
        }
    }
    const uint32_t inner = box[0] * (uint32_t)elem_bytes;
    if (inner % 16 || (span && inner > span)) {
        fprintf(stderr, "emu tensor map: the box's inner dimension is %u bytes (a multiple of 16, "
                "at most the swizzle's %u)\n", inner, span);
        return -1;
    }
    if (span && inner != span) {
        fprintf(stderr, "emu tensor map: a swizzled box narrower than its swizzle span (%u of %u "
                "bytes) is not emulated\n", inner, span);
        return -1;
    }
    m->magic = EMU_TMA_MAGIC;
    m->rank = (uint32_t)rank;
    m->elem_bytes = (uint32_t)elem_bytes;
    m->swizzle = (uint32_t)swizzle;
    m->base = base;
    m->stride[0] = (uint64_t)elem_bytes;
    for (int i = 0; i < rank; i++) {
        m->dim[i] = dim[i];
        m->box[i] = box[i];
        if (i > 0)
            m->stride[i] = stride_bytes[i - 1];
    }
    for (int i = rank; i < 5; i++)
        m->dim[i] = m->box[i] = 1;
    return 0;
}

/* The map at p, copied (a kernel argument on the host may sit at any
 * alignment, ASan's fake stacks included; the device's 64-byte rule is
 * kept by devkit/tma.cuh's alignas). */
static struct ig_emu_tma_map emu_tma_map(const void *p, const char *what)
{
    struct ig_emu_tma_map m;
    memcpy(&m, p, sizeof m);
    if (m.magic != EMU_TMA_MAGIC)
        emu_fail("%s with a tensor map that was not made by ig_tma_encode", what);
    return m;
}

static uint32_t emu_box_bytes(const struct ig_emu_tma_map *m)
{
    uint32_t e = m->elem_bytes;
    for (uint32_t i = 0; i < m->rank; i++)
        e *= m->box[i];
    return e;
}

/* The box's shared-memory destination, checked: in the dynamic area,
 * 128-byte aligned shared address, whole box inside. */
static size_t emu_tma_smem_off(const void *p, uint32_t bytes, const char *what)
{
    const struct emu_smem *s = emu_dyn_smem(what);
    const unsigned char *c = (const unsigned char *)p;
    if (c < s->data || c + bytes > s->data + s->bytes)
        emu_fail("%s: the %u-byte box at %p is not inside the dynamic shared memory", what,
                 bytes, p);
    const size_t off = (size_t)(c - s->data);
    if ((emu.smem_base + off) & 127)
        emu_fail("%s: shared address %zu is not 128-byte aligned", what, emu.smem_base + off);
    return off;
}

/* Byte offset (from the dynamic area's start) of box element e, swizzled. */
static size_t emu_tma_elem_off(const struct ig_emu_tma_map *m, size_t box_off, uint64_t e)
{
    uint64_t a = emu.smem_base + box_off + e * m->elem_bytes;
    if (m->swizzle) {
        const uint64_t mask = m->swizzle == 3 ? 7 : m->swizzle == 2 ? 3 : 1;
        a ^= ((a >> 7) & mask) << 4;
    }
    return (size_t)(a - emu.smem_base);
}

/* Calls f(element index in the box, global address or NULL when outside). */
template <class F>
static void emu_tma_each(const struct ig_emu_tma_map *m, const int32_t *coords, F &&f)
{
    const uint32_t *bx = m->box;
    uint64_t e = 0;
    for (uint32_t i4 = 0; i4 < bx[4]; i4++)
        for (uint32_t i3 = 0; i3 < bx[3]; i3++)
            for (uint32_t i2 = 0; i2 < bx[2]; i2++)
                for (uint32_t i1 = 0; i1 < bx[1]; i1++)
                    for (uint32_t i0 = 0; i0 < bx[0]; i0++, e++) {
                        const uint32_t idx[5] = {i0, i1, i2, i3, i4};
                        const unsigned char *g = (const unsigned char *)m->base;
                        int inside = 1;
                        for (uint32_t d = 0; d < 5; d++) {
                            const int64_t c = (int64_t)(d < m->rank ? coords[d] : 0) + idx[d];
                            if (c < 0 || (uint64_t)c >= m->dim[d]) {
                                inside = 0;
                                break;
                            }
                            g += (uint64_t)c * m->stride[d];
                        }
                        f(e, inside ? g : (const unsigned char *)NULL);
                    }
}

void ig_emu_tma_load(const void *map, void *dst, const int32_t *coords, void *bar)
{
    const char *what = "TMA load (cp.async.bulk.tensor)";
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    const struct ig_emu_tma_map mm = emu_tma_map(map, what), *m = &mm;
    const uint32_t bytes = emu_box_bytes(m);
    const size_t off = emu_tma_smem_off(dst, bytes, what);
    if ((uintptr_t)bar & 7)
        emu_fail("%s: mbarrier address %p is not 8-byte aligned", what, bar);
    struct emu_mbar *mb = emu_mbar_at(b, (size_t)(uintptr_t)bar, what);
    if (!mb->init_fenced)
        emu_fail("%s completes on an mbarrier whose init thread (%u) executed no "
                 "fence.mbarrier_init (or fence.proxy.async) after mbarrier.init",
                 what, mb->init_tid);
    if (t->tid != mb->init_tid && t->vc[mb->init_tid] < mb->init_clk)
        emu_fail("%s on an mbarrier whose init is not ordered before it", what);
    b->tma.emplace_back();
    struct emu_tma_op &op = b->tma.back();
    op.store = 0;
    op.map = *m;
    for (uint32_t d = 0; d < 5; d++)
        op.coords[d] = d < m->rank ? coords[d] : 0;
    op.smem = (unsigned char *)dst;
    op.smem_off = off;
    op.bar_off = (size_t)(uintptr_t)bar;
    op.issuer = t->tid;
    op.bytes = bytes;
    op.vc = t->vc;
    op.vc[emu_agent_tma(b)] = ++b->tma_clock;
    /* The box may be written any time from now: the write is checked now,
     * as the TMA unit's, and its bytes stay in flight until it lands. */
    emu_smem_check_write(emu_agent_tma(b), op.vc.data(), dst, bytes, what, 1);
    struct emu_smem *s = emu_smem_find(dst, bytes, what);
    for (size_t i = off; i < off + bytes; i++) {
        s->shadow[i].pending++;
        s->shadow[i].pender = (int16_t)t->tid;
    }
    b->tma_loads.push_back(b->tma.size() - 1);
}

size_t emu_tma_complete_loads(struct emu_block *b)
{
    const size_t n = b->tma_loads.size();
    if (!n || !b->dyn)
        return 0;
    struct emu_smem *s = NULL;
    for (auto &x : b->smem)
        if (x.data == b->dyn)
            s = &x;
    for (size_t k = 0; k < n; k++) {
        const struct emu_tma_op &op = b->tma[b->tma_loads[k]];
        const struct ig_emu_tma_map *m = &op.map;
        for (size_t i = op.smem_off; i < op.smem_off + op.bytes; i++)
            s->shadow[i].pending--;
        emu_tma_each(m, op.coords, [&](uint64_t e, const unsigned char *g) {
            unsigned char *d = b->dyn + emu_tma_elem_off(m, op.smem_off, e);
            if (g)
                memcpy(d, g, m->elem_bytes); /* ASan checks the global read */
            else
                memset(d, 0, m->elem_bytes);
        });
        emu.stats.tma_loads++;
    }
    /* complete_tx after every copy landed (their order is free). */
    std::vector<size_t> done;
    done.swap(b->tma_loads);
    for (size_t idx : done) {
        const struct emu_tma_op &op = b->tma[idx];
        emu_mbar_complete_tx(b, op.bar_off, op.bytes, op.vc);
    }
    return n;
}

void ig_emu_tma_store(const void *map, const void *src, const int32_t *coords)
{
    const char *what = "TMA store (cp.async.bulk.tensor)";
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    const struct ig_emu_tma_map mm = emu_tma_map(map, what), *m = &mm;
    const uint32_t bytes = emu_box_bytes(m);
    const size_t off = emu_tma_smem_off(src, bytes, what);
    b->tma.emplace_back();
    struct emu_tma_op &op = b->tma.back();
    op.store = 1;
    op.map = *m;
    for (uint32_t d = 0; d < 5; d++)
        op.coords[d] = d < m->rank ? coords[d] : 0;
    op.smem = (unsigned char *)src;
    op.smem_off = off;
    op.bar_off = 0;
    op.issuer = t->tid;
    op.bytes = bytes;
    op.vc = t->vc;
    op.vc[emu_agent_tma(b)] = ++b->tma_clock;
    /* The TMA unit reads the box any time until the wait: now checked, and
     * its bytes may not be written until then. */
    emu_smem_check_read(emu_agent_tma(b), op.vc.data(), src, bytes, what);
    struct emu_smem *s = emu_smem_find(src, bytes, what);
    for (size_t i = off; i < off + bytes; i++) {
        struct emu_shadow *h = &s->shadow[i];
        if (!h->w_async && h->writer < (int)b->n &&
            h->w_fences == (*b->threads)[(unsigned)h->writer].proxy_fences)
            emu_fail("%s reads shared offset %zu, which thread %d wrote (st.shared) with no "
                     "fence.proxy.async after it", what, i, h->writer);
        h->reading++;
    }
    t->bulk_uncommitted.push_back(b->tma.size() - 1);
}

void ig_emu_bulk_commit(void)
{
    struct emu_thread *t = emu.cur;
    t->bulk_groups.push_back(t->bulk_uncommitted);
    t->bulk_uncommitted.clear();
}

void ig_emu_bulk_wait(int n, int read_only)
{
    (void)read_only; /* the stores complete whole: their reads and their writes */
    struct emu_block *b = emu.blk;
    struct emu_thread *t = emu.cur;
    const size_t keep = n < 0 ? 0 : (size_t)n;
    struct emu_smem *s = (struct emu_smem *)emu_dyn_smem("cp.async.bulk.wait_group");
    while (t->bulk_groups.size() > keep) {
        for (size_t idx : t->bulk_groups.front()) {
            const struct emu_tma_op &op = b->tma[idx];
            const struct ig_emu_tma_map *m = &op.map;
            emu_tma_each(m, op.coords, [&](uint64_t e, const unsigned char *g) {
                if (g) /* elements outside the tensor are not written */
                    memcpy((unsigned char *)g, b->dyn + emu_tma_elem_off(m, op.smem_off, e),
                           m->elem_bytes);
            });
            for (size_t i = op.smem_off; i < op.smem_off + op.bytes; i++)
                s->shadow[i].reading--;
            emu_vc_join(t->vc, op.vc); /* its reads happen before the wait returns */
            emu.stats.tma_stores++;
        }
        t->bulk_groups.pop_front();
    }
}
