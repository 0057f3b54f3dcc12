/* tests/emu/test_emu_sync.cc: the emulator's synchronization beyond
 * __syncthreads and its happens-before race detector (emu/sync.cc,
 * emu/tma.cc, emu/smem.cc) through the devkit wrappers (devkit/sync.cuh,
 * devkit/tma.cuh). Each object is used correctly once (the data must come
 * through) and then broken one way at a time, each break reported:
 *   named barriers: a consumer without its bar.sync (race), counts that
 *     disagree, a count larger than its participants (deadlock), a thread
 *     arriving twice, arrivals left at the end; and a barrier of two warps
 *     does not order a third (happens-before per barrier, not an epoch);
 *   __syncwarp: lanes' writes before lane 0's release, or a race without it;
 *   mbarriers: a two-slot ring over six rounds, then a wait on the wrong
 *     parity, a slot refilled before its empty barrier, lanes' writes not
 *     synced before lane 0 arrives, one arrival too many (a phase completes
 *     early), a use not ordered after the init, a phase nobody completes;
 *   TMA: a swizzled box with out-of-bound rows (layout and zero fill
 *     checked), read without the wait, armed without expect_tx, an mbarrier
 *     never fenced for the async proxy, a misaligned destination, an
 *     arrival past the count while the phase waits for bytes; stores
 *     clipped to the tensor, without the proxy fence, their box overwritten
 *     before wait_group.read, never waited for; a map the driver would
 *     refuse;
 *   setmaxnreg: 24 / 240 / 240 from 168 at launch, an .inc nobody frees
 *     registers for (deadlock), an .inc that shrinks, two without a
 *     barrier between (and with one), warps that disagree.
 * Label emu. */
#include "devkit/tma.cuh"
#include "devkit/wgmma.cuh"
#include "tests/emu/expect_fault.h"
#include "tests/test.h"

#include <string.h>

/* Launches fn on one block of `threads` threads with `smem` dynamic bytes. */
template <class F> static int run(unsigned threads, size_t smem, F &&fn)
{
    return ig_emu_launch_fn(dim3(1), dim3(threads), smem, fn);
}

/* The first 1024-byte-aligned shared address in the dynamic area (which
 * the emulator never starts at a multiple of 1024). */
static unsigned char *aligned_1024(unsigned char *p)
{
    uint32_t a = ig_shared_address(p);
    return p + (1024u - a % 1024u) % 1024u;
}

/* ---- named barriers ------------------------------------------------------- */

enum {
    NB_OK,
    NB_NO_SYNC,   /* the consumers read without their bar.sync */
    NB_COUNT,     /* the consumers use another count */
    NB_TOO_HIGH,  /* both sides count more threads than take part */
    NB_TWICE,     /* the producers arrive twice */
    NB_LEFT,      /* the consumers never come */
    NB_SUBSET,    /* warps 2-3 read what warp 0 wrote, ordered only among 0-1 */
};

static void nb_kernel(uint32_t *out, int mode)
{
    IG_SHARED(uint32_t, s, [128]);
    const unsigned t = threadIdx.x, warp = t / 32;
    if (warp >= 4) /* bystanders (NB_TOO_HIGH's block) */
        return;
    if (mode == NB_SUBSET) {
        if (warp < 2) {
            if (warp == 0)
                ig_sts(&s[t], t + 1);
            ig_named_barrier_sync(2, 64);
            if (warp == 1)
                out[t] = ig_lds(&s[t - 32]);
        } else {
            ig_named_barrier_sync(3, 64);
            out[t] = ig_lds(&s[t % 32]); /* not ordered after warp 0's writes */
        }
        return;
    }
    const int count = mode == NB_TOO_HIGH ? 160 : 128;
    if (warp < 2) { /* producers */
        ig_sts(&s[t], 7 * t + 1);
        ig_named_barrier_arrive(1, count);
        if (mode == NB_TWICE)
            ig_named_barrier_arrive(1, count);
        return;
    }
    if (mode == NB_LEFT)
        return;
    if (mode != NB_NO_SYNC)
        ig_named_barrier_sync(1, mode == NB_COUNT ? 96 : count);
    out[t] = ig_lds(&s[t - 64]);
}

static void test_named_barriers(void)
{
    static uint32_t out[128];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ig_emu_set_seed(seed);
        memset(out, 0, sizeof out);
        CHECK(run(128, 0, [&] { nb_kernel(out, NB_OK); }) == 0);
        int bad = 0;
        for (unsigned t = 64; t < 128; t++)
            bad += out[t] != 7 * (t - 64) + 1;
        CHECKF(bad == 0, "%d values wrong after bar.arrive / bar.sync", bad);
    }
    ig_emu_set_seed(1);
    CHECK(ig_emu_last_stats().named_barriers == 1);
    EXPECT_FAULT(run(128, 0, [&] { nb_kernel(out, NB_NO_SYNC); }), "race");
    EXPECT_FAULT(run(128, 0, [&] { nb_kernel(out, NB_COUNT); }), "same count");
    EXPECT_FAULT2(run(192, 0, [&] { nb_kernel(out, NB_TOO_HIGH); }), "deadlock",
                  "named barrier 1");
    EXPECT_FAULT(run(128, 0, [&] { nb_kernel(out, NB_TWICE); }), "already arrived");
    EXPECT_FAULT(run(128, 0, [&] { nb_kernel(out, NB_LEFT); }), "when the block ends");
    EXPECT_FAULT2(run(128, 0, [&] { nb_kernel(out, NB_SUBSET); }), "race", "thread ");
}

/* ---- mbarriers: a two-slot ring ------------------------------------------- */

enum {
    MB_OK,
    MB_PARITY,      /* the consumer waits on the wrong parity */
    MB_NO_EMPTY,    /* the producer refills a slot before its empty barrier */
    MB_NO_SYNCWARP, /* lanes' writes not ordered before lane 0's arrival */
    MB_EXTRA,       /* one arrival too many: a phase completes early */
    MB_NO_INIT_BAR, /* no barrier between the init and the uses */
    MB_STUCK,       /* the last fill is never announced */
};

static void mb_kernel(uint32_t *out, int mode)
{
    IG_DYN_SHARED(unsigned char, raw);
    ig_mbarrier *full = (ig_mbarrier *)raw, *empty = full + 2;
    uint32_t *data = (uint32_t *)(raw + 64); /* [2][32] */
    const unsigned t = threadIdx.x, lane = t % 32;
    if (t == 0) {
        for (int i = 0; i < 2; i++) {
            ig_mbarrier_init(&full[i], 1);
            ig_mbarrier_init(&empty[i], 32);
        }
        ig_fence_mbarrier_init();
    }
    if (mode != MB_NO_INIT_BAR)
        ig_syncthreads();
    const int rounds = 6;
    if (t < 32) { /* producer warp */
        for (int r = 0; r < rounds; r++) {
            const int s = r % 2, k = r / 2;
            if (mode != MB_NO_EMPTY)
                ig_mbarrier_wait(&empty[s], (uint32_t)(k & 1) ^ 1u);
            ig_sts(&data[32 * s + lane], (uint32_t)(100 * r) + lane);
            if (mode != MB_NO_SYNCWARP)
                ig_syncwarp();
            if (lane == 0 && !(mode == MB_STUCK && r == rounds - 1))
                ig_mbarrier_arrive(&full[s]);
        }
        return;
    }
    for (int r = 0; r < rounds; r++) { /* consumer warp */
        const int s = r % 2, k = r / 2;
        ig_mbarrier_wait(&full[s], (uint32_t)(k & 1) ^ (mode == MB_PARITY ? 1u : 0u));
        out[32 * r + lane] = ig_lds(&data[32 * s + (lane + 1) % 32]);
        ig_mbarrier_arrive(&empty[s]);
        if (mode == MB_EXTRA && lane == 0 && r == 1)
            ig_mbarrier_arrive(&empty[s]);
    }
}

static void test_mbarriers(void)
{
    static uint32_t out[6 * 32];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ig_emu_set_seed(seed);
        memset(out, 0, sizeof out);
        CHECK(run(64, 320, [&] { mb_kernel(out, MB_OK); }) == 0);
        int bad = 0;
        for (unsigned r = 0; r < 6; r++)
            for (unsigned l = 0; l < 32; l++)
                bad += out[32 * r + l] != 100 * r + (l + 1) % 32;
        CHECKF(bad == 0, "%d values wrong through the mbarrier ring", bad);
        CHECK(ig_emu_last_stats().mbarrier_phases == 12);
    }
    ig_emu_set_seed(1);
    EXPECT_FAULT(run(64, 320, [&] { mb_kernel(out, MB_PARITY); }), "shared offset");
    EXPECT_FAULT(run(64, 320, [&] { mb_kernel(out, MB_NO_EMPTY); }), "race");
    EXPECT_FAULT(run(64, 320, [&] { mb_kernel(out, MB_NO_SYNCWARP); }), "race");
    EXPECT_FAULT(run(64, 320, [&] { mb_kernel(out, MB_EXTRA); }), "race");
    EXPECT_FAULT(run(64, 320, [&] { mb_kernel(out, MB_NO_INIT_BAR); }), "mbarrier.init");
    EXPECT_FAULT2(run(64, 320, [&] { mb_kernel(out, MB_STUCK); }), "deadlock", "mbarrier");
}

/* ---- TMA ------------------------------------------------------------------ */

enum { ROWS = 100, COLS = 64, LD = 80, BOX_ROWS = 32, ROW0 = 80 };

/* A ROWS x COLS matrix of 16-bit values, rows LD elements apart, and room
 * past it that a store must not touch. */
struct tma_io {
    alignas(64) ig_tma_map map;
    alignas(16) uint16_t g[(ROWS + 20) * LD];
    uint16_t box[BOX_ROWS][COLS]; /* what the kernel read, unswizzled */
};

enum {
    TL_OK,
    TL_NO_WAIT,      /* read without waiting on the mbarrier */
    TL_NO_EXPECT,    /* a plain arrive instead of arrive.expect_tx */
    TL_NO_FENCE,     /* no fence.mbarrier_init after the init */
    TL_MISALIGNED,   /* a destination 16 bytes past 1024-byte alignment */
    TL_EXTRA,        /* a second arrival while the phase waits for its bytes */
};

static void tma_load_kernel(tma_io *io, int mode)
{
    IG_DYN_SHARED(unsigned char, raw);
    ig_mbarrier *bar = (ig_mbarrier *)raw;
    unsigned char *tile = aligned_1024(raw + 64) + (mode == TL_MISALIGNED ? 16 : 0);
    const unsigned t = threadIdx.x;
    if (t == 0) {
        ig_mbarrier_init(bar, 1);
        if (mode != TL_NO_FENCE)
            ig_fence_mbarrier_init();
    }
    ig_syncthreads();
    if (t == 0) {
        if (mode == TL_NO_EXPECT)
            ig_mbarrier_arrive(bar);
        else
            ig_mbarrier_arrive_expect_tx(bar, BOX_ROWS * COLS * 2);
        ig_tma_load_3d(&io->map, tile, bar, 0, ROW0, 0);
        if (mode == TL_EXTRA)
            ig_mbarrier_arrive(bar);
    }
    if (mode != TL_NO_WAIT)
        ig_mbarrier_wait(bar, 0);
    /* Thread t reads row t of the box, unswizzling it. */
    const uint16_t *tl = (const uint16_t *)tile;
    for (int c = 0; c < COLS; c++)
        io->box[t][c] = ig_lds(&tl[t * 64 + (((c / 8) ^ (t % 8)) * 8) + c % 8]);
}

enum {
    TS_OK,
    TS_NO_FENCE,     /* the writers skip fence.proxy.async */
    TS_OVERWRITE,    /* the box is rewritten before wait_group.read */
    TS_NO_WAIT,      /* the issuer never waits for the store */
};

static void tma_store_kernel(tma_io *io, int mode)
{
    IG_DYN_SHARED(unsigned char, raw);
    uint16_t *tile = (uint16_t *)aligned_1024(raw);
    const unsigned t = threadIdx.x; /* row t of the box, swizzled */
    for (int c = 0; c < COLS; c++)
        ig_sts(&tile[t * 64 + (((c / 8) ^ (t % 8)) * 8) + c % 8],
               (uint16_t)(1000 + 64 * t + (unsigned)c));
    if (mode != TS_NO_FENCE)
        ig_fence_proxy_async();
    ig_syncthreads();
    if (t == 0) {
        ig_tma_store_3d(&io->map, tile, 0, ROW0, 0);
        ig_bulk_commit();
        if (mode == TS_OVERWRITE)
            ig_sts(&tile[5], (uint16_t)1);
        if (mode != TS_NO_WAIT)
            ig_bulk_wait_read<0>();
        if (mode != TS_NO_WAIT)
            ig_bulk_wait<0>();
    }
}

static int make_map(tma_io *io, uint64_t stride_bytes)
{
    const uint64_t dim[3] = {COLS, ROWS, 1};
    const uint64_t strides[2] = {stride_bytes, stride_bytes * ROWS};
    const uint32_t box[3] = {COLS, BOX_ROWS, 1};
    return ig_tma_encode(&io->map, io->g, 3, dim, strides, box, IG_TMA_SWIZZLE_128B);
}

static void test_tma(void)
{
    static tma_io io;
    for (int i = 0; i < (ROWS + 20) * LD; i++)
        io.g[i] = (uint16_t)(3 * i + 1);
    CHECK(make_map(&io, LD * 2) == 0);
    const size_t smem = 64 + 1024 + BOX_ROWS * 128 + 16;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ig_emu_set_seed(seed);
        memset(io.box, 0xee, sizeof io.box);
        CHECK(run(BOX_ROWS, smem, [&] { tma_load_kernel(&io, TL_OK); }) == 0);
        int bad = 0;
        for (int r = 0; r < BOX_ROWS; r++)
            for (int c = 0; c < COLS; c++) {
                const int row = ROW0 + r;
                const uint16_t want = row < ROWS ? io.g[row * LD + c] : 0;
                bad += io.box[r][c] != want;
            }
        CHECKF(bad == 0, "%d box elements wrong (layout, swizzle or zero fill)", bad);
        CHECK(ig_emu_last_stats().tma_loads == 1);
    }
    ig_emu_set_seed(1);
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_load_kernel(&io, TL_NO_WAIT); }),
                 "shared offset"); /* in flight, or not even issued yet */
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_load_kernel(&io, TL_NO_EXPECT); }),
                 "shared offset"); /* read before the copy lands, or before it is issued */
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_load_kernel(&io, TL_NO_FENCE); }),
                 "fence.mbarrier_init");
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_load_kernel(&io, TL_MISALIGNED); }),
                 "128-byte aligned");
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_load_kernel(&io, TL_EXTRA); }),
                 "more arrivals than its count");

    /* Stores: only rows < ROWS are written; rows past it keep their bytes. */
    static uint16_t before[(ROWS + 20) * LD];
    memcpy(before, io.g, sizeof before);
    CHECK(run(BOX_ROWS, smem, [&] { tma_store_kernel(&io, TS_OK); }) == 0);
    int bad = 0;
    for (int row = 0; row < ROWS + 20; row++)
        for (int c = 0; c < LD; c++) {
            const int r = row - ROW0;
            const uint16_t want = r >= 0 && row < ROWS && c < COLS
                                      ? (uint16_t)(1000 + 64 * r + c)
                                      : before[row * LD + c];
            bad += io.g[row * LD + c] != want;
        }
    CHECKF(bad == 0, "%d global elements wrong after the store", bad);
    CHECK(ig_emu_last_stats().tma_stores == 1);
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_store_kernel(&io, TS_NO_FENCE); }),
                 "fence.proxy.async");
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_store_kernel(&io, TS_OVERWRITE); }),
                 "still reads");
    EXPECT_FAULT(run(BOX_ROWS, smem, [&] { tma_store_kernel(&io, TS_NO_WAIT); }),
                 "not waited for");

    /* A row stride that is not a multiple of 16 bytes: the driver refuses
     * the map, and so does the emulator. */
    CHECK(make_map(&io, LD * 2 + 2) != 0);
}

/* ---- setmaxnreg ----------------------------------------------------------- */

enum {
    RG_OK,         /* producer 24, consumers 240, from 168 */
    RG_NO_DEC,     /* the producer keeps its registers */
    RG_SHRINK,     /* an .inc below the current count */
    RG_TWICE,      /* two .dec with no barrier of the warpgroup between */
    RG_TWICE_SYNC, /* the same with a named barrier of its 128 threads */
    RG_MISMATCH,   /* one warp of the producer decreases to another count */
};

static void regs_kernel(int mode)
{
    constexpr int kLaunch = ig_launch_regs(384);
    static_assert(kLaunch == 168, "384 threads: 168 registers each at launch");
    const unsigned wg = threadIdx.x / 128;
    if (wg == 0) {
        if (mode == RG_MISMATCH && threadIdx.x / 32 == 1)
            ig_setmaxnreg<false, 32, kLaunch>();
        else if (mode == RG_TWICE || mode == RG_TWICE_SYNC)
            ig_setmaxnreg<false, 40, kLaunch>();
        else if (mode != RG_NO_DEC)
            ig_setmaxnreg<false, 24, kLaunch>();
        if (mode == RG_TWICE_SYNC)
            ig_named_barrier_sync(1, 128);
        if (mode == RG_TWICE || mode == RG_TWICE_SYNC)
            ig_setmaxnreg<false, 24, kLaunch>();
        return;
    }
    if (mode == RG_SHRINK)
        ig_setmaxnreg<true, 160, kLaunch>();
    else
        ig_setmaxnreg<true, 240, kLaunch>();
}

static void test_setmaxnreg(void)
{
    CHECK(run(384, 0, [&] { regs_kernel(RG_OK); }) == 0);
    CHECK(run(384, 0, [&] { regs_kernel(RG_TWICE_SYNC); }) == 0);
    EXPECT_FAULT2(run(384, 0, [&] { regs_kernel(RG_NO_DEC); }), "deadlock", "setmaxnreg.inc");
    EXPECT_FAULT(run(384, 0, [&] { regs_kernel(RG_SHRINK); }), "must not shrink");
    EXPECT_FAULT(run(384, 0, [&] { regs_kernel(RG_TWICE); }), "no barrier of all its warps");
    EXPECT_FAULT(run(384, 0, [&] { regs_kernel(RG_MISMATCH); }), "same instruction");
}

int main(void)
{
    test_named_barriers();
    test_mbarriers();
    test_tma();
    test_setmaxnreg();
    return test_summary("test_emu_sync");
}
