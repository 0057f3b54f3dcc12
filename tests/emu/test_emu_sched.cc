/* tests/emu/test_emu_sched.cc: the emulator's scheduling and fault finding:
 * indices and per-block shared memory, seeded barrier order, and that each
 * classic kernel bug is reported: a shared-memory race (read after write and
 * write after read without a barrier), a missing cp.async wait (stale data),
 * a cp.async never waited for, a barrier not every thread reaches, threads at
 * different barriers, a collective a lane never reaches, reading
 * uninitialised shared memory (also what only an earlier block wrote), a
 * misaligned ldmatrix row, lanes of a warp in different collectives; a
 * programmatic dependent launch: what the previous
 * kernel writes is hidden from each block until all its threads have met at
 * griddepcontrol.wait, and a block that never waits is a fault; static and
 * dynamic shared memory past 48 KiB together without the launch's raise
 * (ig_emu_next_launch_smem_optin) is a fault, with it not. Label emu. */
#include "devkit/intrinsics.cuh"
#include "tests/emu/expect_fault.h"
#include "tests/test.h"

#include <string.h>


static int launch(ig_emu_dim3 grid, ig_emu_dim3 block, void (*fn)(void *), void *arg)
{
    return ig_emu_launch(grid, block, 0, fn, arg);
}

/* ---- indices and shared memory per block ---------------------------------- */

struct ids { unsigned t[6][64][6]; unsigned sum[6]; };

__global__ void ids_kernel(void *arg)
{
    ids *io = (ids *)arg;
    IG_SHARED(unsigned, part, [64]);
    unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
    unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned *o = io->t[b][t];
    o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
    o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockDim.x * blockDim.y * blockDim.z;
    ig_sts(&part[t], t + 100 * b);
    ig_syncthreads();
    if (t == 0) {
        unsigned s = 0;
        for (int i = 0; i < 64; i++)
            s += ig_lds(&part[i]);
        io->sum[b] = s;
    }
}

static void test_indices(void)
{
    static ids io;
    CHECK(launch(dim3(3, 2), dim3(8, 4, 2), ids_kernel, &io) == 0);
    int bad = 0;
    for (unsigned b = 0; b < 6; b++) {
        bad += io.sum[b] != 64 * 63 / 2 + 6400 * b;
        for (unsigned t = 0; t < 64; t++) {
            unsigned *o = io.t[b][t];
            bad += o[0] != t % 8 || o[1] != (t / 8) % 4 || o[2] != t / 32;
            bad += o[3] != b % 3 || o[4] != b / 3 || o[5] != 64;
        }
    }
    CHECKF(bad == 0, "%d wrong indices or sums", bad);
    CHECK(ig_emu_last_stats().blocks == 6);
}

/* ---- seeded order at barriers --------------------------------------------- */

struct order { unsigned n, seen[64]; };

__global__ void order_kernel(void *arg)
{
    order *io = (order *)arg;
    ig_syncthreads();
    io->seen[io->n++] = threadIdx.x; /* fibers: no data race on the host */
}

static void test_seeded_order(void)
{
    static order a, b, c;
    ig_emu_set_seed(7);
    CHECK(launch(dim3(1), dim3(64), order_kernel, &a) == 0);
    ig_emu_set_seed(7);
    CHECK(launch(dim3(1), dim3(64), order_kernel, &b) == 0);
    ig_emu_set_seed(8);
    CHECK(launch(dim3(1), dim3(64), order_kernel, &c) == 0);
    ig_emu_set_seed(1);
    CHECK(a.n == 64 && memcmp(a.seen, b.seen, sizeof a.seen) == 0);
    CHECK(memcmp(a.seen, c.seen, sizeof a.seen) != 0);
}

/* ---- races ---------------------------------------------------------------- */

static int with_barrier;

/* Each thread writes its slot and reads its neighbour's. */
__global__ void neighbour_kernel(void *arg)
{
    unsigned *out = (unsigned *)arg;
    IG_SHARED(unsigned, s, [64]);
    unsigned t = threadIdx.x;
    ig_sts(&s[t], t * t);
    if (with_barrier)
        ig_syncthreads();
    out[t] = ig_lds(&s[(t + 1) % 64]);
}

/* Reads a neighbour's slot, then overwrites its own without a barrier
 * between (write after read). */
__global__ void war_kernel(void *arg)
{
    unsigned *out = (unsigned *)arg;
    IG_SHARED(unsigned, s, [64]);
    unsigned t = threadIdx.x;
    ig_sts(&s[t], t);
    ig_syncthreads();
    out[t] = ig_lds(&s[(t + 1) % 64]);
    if (with_barrier)
        ig_syncthreads();
    ig_sts(&s[t], 2 * t);
}

static void test_races(void)
{
    static unsigned out[64];
    with_barrier = 1;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ig_emu_set_seed(seed);
        CHECK(launch(dim3(2), dim3(64), neighbour_kernel, out) == 0);
        CHECK(out[5] == 36 && out[63] == 0);
        CHECK(launch(dim3(1), dim3(64), war_kernel, out) == 0);
    }
    ig_emu_set_seed(1);
    with_barrier = 0;
    EXPECT_FAULT(launch(dim3(1), dim3(64), neighbour_kernel, out), "race");
    EXPECT_FAULT(launch(dim3(1), dim3(64), war_kernel, out), "race");
}

/* ---- cp.async ------------------------------------------------------------- */

static int cp_mode; /* 0 correct, 1 no wait, 2 wait but no barrier, 3 wait<1> on 2 groups, 4 never wait */

__global__ void cp_kernel(void *arg)
{
    uint32_t *g = (uint32_t *)arg; /* [0,256) input, [256,512) output */
    IG_SHARED(uint32_t, s, [2][128]);
    unsigned t = threadIdx.x; /* 32 threads, 4 words each per stage */
    ig_cp_async16(&s[0][4 * t], &g[4 * t], true);
    ig_cp_async_commit();
    ig_cp_async16(&s[1][4 * t], &g[128 + 4 * t], t < 16);
    ig_cp_async_commit();
    if (cp_mode == 4)
        return;
    if (cp_mode == 0 || cp_mode == 2)
        ig_cp_async_wait<0>();
    if (cp_mode == 3)
        ig_cp_async_wait<1>();
    if (cp_mode != 2)
        ig_syncthreads();
    for (int i = 0; i < 8; i++) { /* each thread reads words others copied */
        unsigned e = (t * 8 + i + 4) % 256;
        g[256 + e] = ig_lds(&s[e / 128][e % 128]);
    }
}

static void test_cp_async(void)
{
    static uint32_t g[512];
    for (int i = 0; i < 256; i++)
        g[i] = 1000u + (uint32_t)i;
    cp_mode = 0;
    CHECK(launch(dim3(1), dim3(32), cp_kernel, g) == 0);
    int bad = 0;
    for (int e = 0; e < 256; e++)
        bad += g[256 + e] != (e < 128 + 64 ? 1000u + (uint32_t)e : 0u); /* zero-fill */
    CHECKF(bad == 0, "%d words wrong after cp.async", bad);
    cp_mode = 1;
    EXPECT_FAULT(launch(dim3(1), dim3(32), cp_kernel, g), "in flight");
    cp_mode = 2;
    EXPECT_FAULT(launch(dim3(1), dim3(32), cp_kernel, g), "race");
    cp_mode = 3;
    EXPECT_FAULT(launch(dim3(1), dim3(32), cp_kernel, g), "in flight");
    cp_mode = 4;
    EXPECT_FAULT(launch(dim3(1), dim3(32), cp_kernel, g), "not waited");
}

/* ---- barriers and collectives that cannot complete ------------------------ */

static int bar_mode;

__global__ void bar_kernel(void *arg)
{
    (void)arg;
    unsigned t = threadIdx.x;
    if (bar_mode == 0 && t < 32)
        ig_syncthreads(); /* half the block never comes */
    if (bar_mode == 1) {
        if (t == 5)
            return;
        ig_syncthreads();
    }
    if (bar_mode == 2) {
        if (t & 1)
            ig_syncthreads();
        else
            ig_syncthreads();
    }
    if (bar_mode == 3) {
        if (t == 40)
            return;
        ig_shfl_xor(t, 1);
    }
    if (bar_mode == 4) {
        IG_SHARED(float, s, [16]);
        if (t == 0)
            (void)ig_lds(&s[3]);
    }
    if (bar_mode == 5) {
        IG_SHARED(uint16_t, s, [8][8]);
        uint32_t r[1];
        if (t < 8)
            ig_sts(&s[t][0], (uint16_t)t);
        ig_syncthreads();
        ig_ldmatrix_x1(r, &s[t % 8][0]); /* columns 1..7 never written */
    }
    if (bar_mode == 6) {
        IG_SHARED(uint16_t, s, [8][16]);
        uint32_t r[1];
        for (int i = 0; i < 4; i++)
            ig_sts(&s[t % 8][4 * (t / 8) + i], (uint16_t)i);
        ig_syncthreads();
        ig_ldmatrix_x1(r, &s[t % 8][1]); /* rows must be 16-byte aligned */
    }
    if (bar_mode == 8) { /* block 1 reads what only block 0 wrote (the same buffer, reused) */
        IG_SHARED(float, s, [64]);
        if (blockIdx.x == 0)
            ig_sts(&s[t], 1.0f);
        ig_syncthreads();
        if (blockIdx.x == 1 && t == 0)
            (void)ig_lds(&s[5]);
    }
    if (bar_mode == 7) { /* lanes of one warp in different collectives */
        if (t == 3)
            ig_shfl_idx(t, 0);
        else
            ig_shfl_xor(t, 1);
    }
}

static void test_stuck(void)
{
    bar_mode = 0;
    EXPECT_FAULT(launch(dim3(1), dim3(64), bar_kernel, NULL), "barrier");
    bar_mode = 1;
    EXPECT_FAULT(launch(dim3(1), dim3(64), bar_kernel, NULL), "barrier");
    bar_mode = 2;
    EXPECT_FAULT(launch(dim3(1), dim3(64), bar_kernel, NULL), "while other threads wait");
    bar_mode = 3;
    EXPECT_FAULT(launch(dim3(1), dim3(64), bar_kernel, NULL), "never reach");
    bar_mode = 4;
    EXPECT_FAULT(launch(dim3(1), dim3(64), bar_kernel, NULL), "never written");
    bar_mode = 5;
    EXPECT_FAULT(launch(dim3(1), dim3(32), bar_kernel, NULL), "never written");
    bar_mode = 6;
    EXPECT_FAULT(launch(dim3(1), dim3(32), bar_kernel, NULL), "not 16-byte aligned");
    bar_mode = 7;
    EXPECT_FAULT(launch(dim3(1), dim3(32), bar_kernel, NULL), "same instruction");
    /* Shared memory of an earlier block or launch is fresh again (the
     * emulator reuses its buffers and resets their shadow lazily). */
    bar_mode = 8;
    EXPECT_FAULT(launch(dim3(2), dim3(64), bar_kernel, NULL), "block (1,0,0) thread (0,0,0): "
                 "shared load reads shared offset 20, never written");
    /* The emulator is usable again after faults. */
    static ids io;
    CHECK(launch(dim3(3, 2), dim3(8, 4, 2), ids_kernel, &io) == 0);
}

/* ---- programmatic dependent launch ------------------------------------------ */

/* in[0] stands for what the previous kernel writes: the hooks hide it (-1)
 * at each block's start and show it (7) at the block's wait. Each thread
 * records what it read before its wait and after. */
struct pdl_io {
    int in[1];
    int before[4][64], after[4][64];
    int hides, shows;
};
static int pdl_mode; /* 0 every thread waits, 1 thread 9 exits first, 2 block 1 never waits */

static void pdl_hide(void *c) { ((pdl_io *)c)->in[0] = -1, ((pdl_io *)c)->hides++; }
static void pdl_show(void *c) { ((pdl_io *)c)->in[0] = 7, ((pdl_io *)c)->shows++; }

__global__ void pdl_kernel(void *arg)
{
    pdl_io *io = (pdl_io *)arg;
    const unsigned b = blockIdx.x, t = threadIdx.x;
    io->before[b][t] = io->in[0];
    ig_launch_dependents();
    if ((pdl_mode == 1 && t == 9) || (pdl_mode == 2 && b == 1))
        return;
    ig_grid_dependency_wait();
    io->after[b][t] = io->in[0];
    ig_grid_dependency_wait(); /* a second wait returns at once */
}

static void test_pdl(void)
{
    static pdl_io io;
    const ig_emu_pdl_hooks hooks = {pdl_hide, pdl_show, &io};
    ig_emu_set_pdl_hooks(&hooks);
    for (pdl_mode = 0; pdl_mode < 2; pdl_mode++) {
        memset(&io, 0, sizeof io);
        io.in[0] = 7;
        ig_emu_next_launch_pdl();
        CHECK(launch(dim3(4), dim3(64), pdl_kernel, &io) == 0);
        int bad = 0;
        for (int b = 0; b < 4; b++)
            for (int t = 0; t < 64; t++)
                bad += io.before[b][t] != -1 ||
                       (io.after[b][t] != (pdl_mode == 1 && t == 9 ? 0 : 7));
        CHECKF(bad == 0, "mode %d: %d threads saw the previous kernel's output before their "
               "wait or not after it", pdl_mode, bad);
        CHECK(io.hides == 4 && io.shows == 4 && io.in[0] == 7);
        CHECK(ig_emu_last_stats().griddep_waits == 4 && ig_emu_last_stats().triggers == 256);
        /* a plain launch: no hooks, the wait returns at once */
        memset(&io, 0, sizeof io);
        io.in[0] = 7;
        CHECK(launch(dim3(4), dim3(64), pdl_kernel, &io) == 0);
        CHECK(io.hides == 0 && io.before[3][63] == 7 && ig_emu_last_stats().griddep_waits == 0);
    }
    /* a block that never waits: its grid could complete before the previous one */
    pdl_mode = 2;
    memset(&io, 0, sizeof io);
    ig_emu_next_launch_pdl();
    EXPECT_FAULT(launch(dim3(4), dim3(64), pdl_kernel, &io), "without griddepcontrol.wait");
    CHECK(io.in[0] == 7); /* shown again after the fault */
    ig_emu_set_pdl_hooks(NULL);
}

/* ---- the 48 KiB default: static and dynamic shared memory together ------- */

__global__ void smem_kernel(void *arg)
{
    IG_SHARED(unsigned, slot, [4]); /* static bytes on top of the launch's dynamic ones */
    IG_DYN_SHARED(unsigned char, dyn);
    if (threadIdx.x == 0) {
        ig_sts(&slot[0], 1u);
        ig_sts(&dyn[0], (unsigned char)1);
        *(unsigned *)arg = ig_lds(&slot[0]) + ig_lds(&dyn[0]);
    }
}

static void test_smem_default(void)
{
    unsigned out = 0;
    CHECK(ig_emu_launch(dim3(2), dim3(32), 48 * 1024 - 16, smem_kernel, &out) == 0 && out == 2);
    EXPECT_FAULT(ig_emu_launch(dim3(2), dim3(32), 48 * 1024, smem_kernel, &out),
                 "without cudaFuncAttributeMaxDynamicSharedMemorySize raised");
    ig_emu_next_launch_smem_optin(48 * 1024); /* IG_SMEM_OPTIN's emulated side */
    out = 0;
    CHECK(ig_emu_launch(dim3(2), dim3(32), 48 * 1024, smem_kernel, &out) == 0 && out == 2);
    /* the raise lasts one launch */
    EXPECT_FAULT(ig_emu_launch(dim3(2), dim3(32), 48 * 1024, smem_kernel, &out),
                 "without cudaFuncAttributeMaxDynamicSharedMemorySize raised");
}

int main(void)
{
    test_indices();
    test_seeded_order();
    test_races();
    test_cp_async();
    test_stuck();
    test_pdl();
    test_smem_default();
    return test_summary("test_emu_sched");
}
