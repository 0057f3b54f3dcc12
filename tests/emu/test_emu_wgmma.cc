/* tests/emu/test_emu_wgmma.cc: the emulator's wgmma (emu/wgmma.cc) through
 * the devkit wrappers (devkit/wgmma.cuh) against plain matrix products of
 * small integers (exact in bf16, f16 and f32): bf16 and f16, N = 24, 64, 128,
 * A from shared memory (K- and M-major) or registers, B K- and N-major,
 * 128-, 64-, 32-byte swizzle and none, K stepped through a 64-wide tile by
 * advancing the descriptor's start address (+32 bytes inside a swizzled row), chains
 * with accumulate 0 then 1 and accumulate onto given values; the async
 * semantics (results only at the wait that covers them, two groups completed
 * in order, operands overwritten before the wait are a race with the MMA);
 * shared addresses (a per-launch base,
 * a multiple of 16 but not of 1024: tiles are copied to an aligned address,
 * and a swizzled tile left unaligned multiplies wrong bytes); the wgmma.fence
 * rule (needed before the first MMA and after other writes to its registers,
 * not after a wait that left them alone); and the faults: a warp of the
 * warpgroup in a different shape, a block that is not whole warpgroups, an
 * MMA never waited for, an operand outside the dynamic shared memory, one
 * never written, one written without fence.proxy.async after the write, an
 * MMA issued before the barrier, proxy fence or cp.async wait that makes its
 * operands valid, accumulators written while their MMA is in flight.
 * The host placements below restate docs/wgmma.md, which emu/wgmma.cc
 * implements too: their agreement shows the two consistent, not that the
 * reading of the ISA is right; only the kernels' GPU test
 * (tests/gpu/test_flash_attn_gpu.c) judges that. Label emu. */
#include "core/half.h"
#define IG_WGMMA_EMU_ANY_N 1 /* N = 24 too: the emulator itself is under test */
#include "devkit/wgmma.cuh"
#include "tests/emu/expect_fault.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>



/* A test kernel on one warpgroup (one block of 128 threads) with the test's
 * shared memory. */
#define WG_LAUNCH(kernel, ...) IG_LAUNCH(kernel, dim3(1), dim3(128), SMEM_BYTES, 0, __VA_ARGS__)

enum { KMAJ = 0, MNMAJ = 1, REGS = 2 };
/* The image of A and B is copied to the first 1024-byte-aligned shared
 * address of the dynamic area (whose start is not aligned: the emulator's
 * base), so the area has 1024 bytes of slack. */
enum { KDIM = 64, A_OFF = 0, B_OFF = 8192, IMG_BYTES = 24576, SMEM_BYTES = IMG_BYTES + 1024 };
#define POISON 7.5f

/* ---- host side: operands in shared-memory layouts ------------------------- */

struct tile_fmt {
    uint32_t lbo, sbo;          /* descriptor offsets */
    uint32_t koff[KDIM / 16];   /* start-address offset of each 16-K step */
    int swizzle;
};

/* Byte offset of element (x, k) of an X x 64 (K) operand in the layout
 * (x along M or N), and the descriptor fields that go with it. Swizzled:
 * rows of W bytes; 16-byte chunk c of row r of an 8-row atom is stored at
 * chunk c ^ (bits 7.. of r*W), i.e. r, r/2 or r/4 for W = 128, 64, 32. */
static uint32_t place(int major, int swizzle, int x, int k, int X, tile_fmt *f)
{
    f->swizzle = swizzle;
    if (swizzle == IG_WGMMA_SWIZZLE_NONE && major == KMAJ) {
        /* Core matrices of 8 rows (x) x 8 k, 128 bytes; LBO steps k. */
        f->lbo = 128;
        f->sbo = KDIM / 8 * 128;
        for (int s = 0; s < KDIM / 16; s++)
            f->koff[s] = 256 * s;
        return (x / 8) * (KDIM / 8 * 128) + (k / 8) * 128 + (x % 8) * 16 + (k % 8) * 2;
    }
    if (swizzle == IG_WGMMA_SWIZZLE_NONE) {
        /* Core matrices of 8 k x 8 x (x contiguous); SBO steps x, LBO k. */
        f->sbo = 128;
        f->lbo = (uint32_t)X / 8 * 128;
        for (int s = 0; s < KDIM / 16; s++)
            f->koff[s] = 2 * f->lbo * s;
        return (k / 8) * (X / 8 * 128) + (x / 8) * 128 + (k % 8) * 16 + (x % 8) * 2;
    }
    int W = swizzle == IG_WGMMA_SWIZZLE_128B ? 128 : swizzle == IG_WGMMA_SWIZZLE_64B ? 64 : 32;
    int E = W / 2; /* elements per row */
    auto sw = [W](int r) { return (r * W / 128) % (W / 16); };
    if (major == KMAJ) {
        /* Atoms of X rows x E k one after another; inside, 8-row groups at
         * SBO = 8W; a step inside a row advances the start by 32 bytes. */
        f->lbo = 16; /* unused ("assumed 1") */
        f->sbo = 8 * (uint32_t)W;
        for (int s = 0; s < KDIM / 16; s++)
            f->koff[s] = (uint32_t)((16 * s / E) * X * W + (16 * s % E) * 2);
        return (uint32_t)((k / E) * X * W + (x / 8) * 8 * W + (x % 8) * W +
                          ((((k % E) / 8) ^ sw(x % 8)) * 16) + (k % 8) * 2);
    }
    /* Atoms of E x by 8 k: k groups at SBO = 8W, x atoms at LBO = KDIM*W. */
    f->sbo = 8 * (uint32_t)W;
    f->lbo = KDIM * (uint32_t)W;
    for (int s = 0; s < KDIM / 16; s++)
        f->koff[s] = 2 * f->sbo * s;
    return (uint32_t)((x / E) * KDIM * W + (k / 8) * 8 * W + (k % 8) * W +
                      ((((x % E) / 8) ^ sw(k % 8)) * 16) + (x % 8) * 2);
}

static uint16_t to_half(bool bf16, float v) { return bf16 ? ig_f32_to_bf16(v) : ig_f32_to_f16(v); }

/* Element of D held by thread l's accumulator i (the layout of wgmma.cuh). */
static void d_pos(int l, int i, int *row, int *col)
{
    *row = 16 * (l / 32) + (l % 32) / 4 + 8 * ((i % 4) / 2);
    *col = 8 * (i / 4) + 2 * (l % 4) + i % 2;
}

struct wg_io {
    alignas(16) uint32_t img[IMG_BYTES / 4]; /* 16-byte aligned for cp.async */
    uint32_t img2[IMG_BYTES / 4];            /* B overwritten after issue */
    uint32_t a_regs[KDIM / 16][128][4];
    tile_fmt fa, fb;
    int steps;      /* 16-K steps in the chain */
    int acc_first;  /* accumulate onto c at the first step */
    int unpadded;   /* copy the image to the area's start, not aligned */
    float c[128][128], out[128][128], early[128][128], mid[128][128];
};

struct wg_case {
    bool bf16;
    int n, a_major, b_major, a_swz, b_swz;
    float A[64][KDIM], B[KDIM][128];
};

static void build(wg_io *io, wg_case *c, unsigned seed)
{
    srand(seed);
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < KDIM; k++)
            c->A[m][k] = (float)(rand() % 9 - 4);
    for (int k = 0; k < KDIM; k++)
        for (int n = 0; n < 128; n++)
            c->B[k][n] = (float)(rand() % 9 - 4);
    memset(io->img, 0, sizeof io->img);
    uint16_t *img = (uint16_t *)io->img;
    for (int m = 0; m < 64; m++)
        for (int k = 0; k < KDIM; k++) {
            uint32_t o = place(c->a_major == REGS ? KMAJ : c->a_major, c->a_swz, m, k, 64, &io->fa);
            img[(A_OFF + o) / 2] = to_half(c->bf16, c->A[m][k]);
        }
    for (int k = 0; k < KDIM; k++)
        for (int n = 0; n < c->n; n++) {
            uint32_t o = place(c->b_major, c->b_swz, n, k, c->n, &io->fb);
            CHECK(B_OFF + o + 2 <= IMG_BYTES);
            img[(B_OFF + o) / 2] = to_half(c->bf16, c->B[k][n]);
        }
    for (int s = 0; s < KDIM / 16; s++)
        for (int l = 0; l < 128; l++)
            for (int r = 0; r < 4; r++) {
                int row = 16 * (l / 32) + (l % 32) / 4 + 8 * (r % 2);
                int col = 16 * s + 2 * (l % 4) + 8 * (r / 2);
                io->a_regs[s][l][r] = (uint32_t)to_half(c->bf16, c->A[row][col]) |
                                      (uint32_t)to_half(c->bf16, c->A[row][col + 1]) << 16;
            }
    for (int l = 0; l < 128; l++)
        for (int i = 0; i < 128; i++) {
            io->c[l][i] = (float)(rand() % 21 - 10);
            io->out[l][i] = io->early[l][i] = io->mid[l][i] = NAN;
        }
}

/* D = (acc_first ? C : 0) + A[:, k0..k1) * B[k0..k1, :], compared with what
 * thread l's accumulators hold in got (all n/2 of them); the first
 * differences are printed unless what is NULL (differences expected). */
static int compare(const wg_io *io, const wg_case *c, const float (*got)[128], int k0, int k1,
                   int acc, const char *what)
{
    int bad = 0;
    for (int l = 0; l < 128; l++)
        for (int i = 0; i < c->n / 2; i++) {
            int row, col;
            d_pos(l, i, &row, &col);
            float want = acc ? io->c[l][i] : 0.0f;
            for (int k = k0; k < k1; k++)
                want += c->A[row][k] * c->B[k][col];
            if (!(got[l][i] == want) && bad++ < 4 && what)
                fprintf(stderr, "%s (%s n %d A %d/%d B %d/%d): D[%d][%d] = %g, want %g\n", what,
                        c->bf16 ? "bf16" : "f16", c->n, c->a_major, c->a_swz, c->b_major,
                        c->b_swz, row, col, got[l][i], want);
        }
    return bad;
}

/* ---- kernels -------------------------------------------------------------- */

/* The first word of the area at a multiple of 1024 bytes of shared address
 * (the kernels' pad: the swizzle patterns repeat every 1024 bytes there). */
__device__ uint32_t *aligned_tiles(uint32_t *sm)
{
    return sm + (1024u - ig_shared_address(sm) % 1024u) % 1024u / 4;
}

/* The image (swizzled as if its start were 1024-aligned) at the aligned
 * start, or, unpadded, at the area's start; returns where. */
__device__ const unsigned char *copy_in(uint32_t *sm, const uint32_t *img, int unpadded = 0)
{
    uint32_t *t = unpadded ? sm : aligned_tiles(sm);
    for (unsigned i = threadIdx.x; i < IMG_BYTES / 4; i += blockDim.x)
        ig_sts(&t[i], img[i]);
    ig_fence_proxy_async();
    ig_syncthreads();
    return (const unsigned char *)t;
}

__device__ uint64_t desc_of(const unsigned char *tile, const tile_fmt &f, int step)
{
    return ig_wgmma_desc(ig_shared_address(tile + f.koff[step]), f.lbo, f.sbo, f.swizzle);
}

/* A chain of io->steps MMAs over K in one group. */
template <class T, int N, int TA, int TB, int RS> __global__ void chain_kernel(wg_io *io)
{
    IG_DYN_SHARED(uint32_t, sm);
    unsigned l = threadIdx.x;
    const unsigned char *base = copy_in(sm, io->img, io->unpadded);
    float d[N / 2];
    for (int i = 0; i < N / 2; i++)
        d[i] = io->acc_first ? io->c[l][i] : POISON;
    ig_wgmma_fence();
    for (int s = 0; s < io->steps; s++) {
        uint64_t bd = desc_of(base + B_OFF, io->fb, s);
        int acc = s > 0 || io->acc_first;
        if (RS)
            ig_wgmma_rs<T, N, TB>(d, io->a_regs[s][l], bd, acc);
        else
            ig_wgmma_ss<T, N, TA, TB>(d, desc_of(base + A_OFF, io->fa, s), bd, acc);
    }
    ig_wgmma_commit();
    for (int i = 0; i < N / 2; i++)
        io->early[l][i] = d[i]; /* before the wait: untouched */
    ig_wgmma_wait<0>();
    ig_wgmma_fence_operand(d);
    for (int i = 0; i < N / 2; i++)
        io->out[l][i] = d[i];
}

template <class T, int N, int TA, int TB, int RS> static void run_chain(wg_case *c, int acc_first)
{
    static wg_io io;
    CHECK(c->b_major == TB && c->a_major == (RS ? REGS : TA));
    build(&io, c, (unsigned)(c->n * 7 + c->a_major * 3 + c->b_major + c->a_swz * 11 + c->bf16));
    io.steps = KDIM / 16;
    io.acc_first = acc_first;
    io.unpadded = 0;
    CHECK(WG_LAUNCH((chain_kernel<T, N, TA, TB, RS>), &io) == 0);
    CHECKF(compare(&io, c, io.out, 0, KDIM, acc_first, "chain") == 0, "chain wrong");
    int early_ok = 1;
    for (int l = 0; l < 128; l++)
        for (int i = 0; i < N / 2; i++)
            early_ok &= io.early[l][i] == (acc_first ? io.c[l][i] : POISON);
    CHECKF(early_ok, "accumulators changed before the wait");
}

static wg_case *make_case(bool bf16, int n, int a_major, int b_major, int a_swz, int b_swz)
{
    static wg_case c;
    c = {};
    c.bf16 = bf16;
    c.n = n;
    c.a_major = a_major;
    c.b_major = b_major;
    c.a_swz = a_swz;
    c.b_swz = b_swz;
    return &c;
}

/* The case the protocol tests share: bf16, N = 64, both operands K-major
 * with the 128-byte swizzle, built into io. */
static wg_case *plain_case(wg_io *io, unsigned seed)
{
    wg_case *c = make_case(true, 64, KMAJ, KMAJ, IG_WGMMA_SWIZZLE_128B, IG_WGMMA_SWIZZLE_128B);
    build(io, c, seed);
    return c;
}

static void test_layouts(void)
{
    const int S = IG_WGMMA_SWIZZLE_128B, Z = IG_WGMMA_SWIZZLE_NONE;
    run_chain<ig_bf16_t, 64, 0, 0, 0>(make_case(true, 64, KMAJ, KMAJ, S, S), 0);
    run_chain<ig_f16_t, 128, 0, 1, 0>(make_case(false, 128, KMAJ, MNMAJ, S, S), 0);
    run_chain<ig_bf16_t, 128, 1, 0, 0>(make_case(true, 128, MNMAJ, KMAJ, S, Z), 1);
    run_chain<ig_f16_t, 64, 0, 1, 1>(make_case(false, 64, REGS, MNMAJ, S, Z), 0);
    run_chain<ig_bf16_t, 24, 0, 1, 0>(make_case(true, 24, KMAJ, MNMAJ, Z, S), 1);
    run_chain<ig_f16_t, 64, 1, 0, 0>(make_case(false, 64, MNMAJ, KMAJ, Z, S), 0);
    run_chain<ig_bf16_t, 128, 0, 0, 1>(make_case(true, 128, REGS, KMAJ, Z, S), 1);
    const int S64 = IG_WGMMA_SWIZZLE_64B, S32 = IG_WGMMA_SWIZZLE_32B;
    run_chain<ig_bf16_t, 64, 0, 1, 0>(make_case(true, 64, KMAJ, MNMAJ, S64, S32), 0);
    run_chain<ig_f16_t, 128, 1, 0, 0>(make_case(false, 128, MNMAJ, KMAJ, S32, S64), 0);
    run_chain<ig_bf16_t, 128, 0, 1, 0>(make_case(true, 128, KMAJ, MNMAJ, S32, S64), 1);
}

/* Two groups in flight: wait<1> completes the older only, wait<0> the other. */
__global__ void groups_kernel(wg_io *io)
{
    IG_DYN_SHARED(uint32_t, sm);
    unsigned l = threadIdx.x;
    const unsigned char *base = copy_in(sm, io->img);
    float d1[32], d2[32];
    for (int i = 0; i < 32; i++)
        d1[i] = d2[i] = POISON;
    ig_wgmma_fence();
    ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d1, desc_of(base + A_OFF, io->fa, 0),
                                     desc_of(base + B_OFF, io->fb, 0), 0);
    ig_wgmma_commit();
    ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d2, desc_of(base + A_OFF, io->fa, 1),
                                     desc_of(base + B_OFF, io->fb, 1), 0);
    ig_wgmma_commit();
    for (int i = 0; i < 32; i++)
        io->early[l][i] = d1[i];
    ig_wgmma_wait<1>();
    for (int i = 0; i < 32; i++) {
        io->out[l][i] = d1[i];
        io->mid[l][i] = d2[i];
    }
    ig_wgmma_wait<0>();
    for (int i = 0; i < 32; i++)
        io->c[l][i] = d2[i];
}

/* B is overwritten (after a barrier) between the issue and the wait: a race
 * with the MMA, which may read it until the wait. */
__global__ void overwrite_kernel(wg_io *io)
{
    IG_DYN_SHARED(uint32_t, sm);
    unsigned l = threadIdx.x;
    const unsigned char *base = copy_in(sm, io->img);
    float d[32];
    ig_wgmma_fence();
    ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d, desc_of(base + A_OFF, io->fa, 0),
                                     desc_of(base + B_OFF, io->fb, 0), 0);
    ig_wgmma_commit();
    ig_syncthreads();
    uint32_t *tiles = (uint32_t *)base;
    for (unsigned i = B_OFF / 4 + l; i < IMG_BYTES / 4; i += blockDim.x)
        ig_sts(&tiles[i], io->img2[i]);
    ig_fence_proxy_async();
    ig_syncthreads();
    ig_wgmma_wait<0>();
    for (int i = 0; i < 32; i++)
        io->out[l][i] = d[i];
}

static void test_async(void)
{
    static wg_io io;
    static wg_case c, c2;
    const int S = IG_WGMMA_SWIZZLE_128B;
    c = *make_case(true, 64, KMAJ, KMAJ, S, S);
    build(&io, &c, 5);
    CHECK(WG_LAUNCH(groups_kernel, &io) == 0);
    CHECKF(compare(&io, &c, io.out, 0, 16, 0, "first group at wait<1>") == 0, "first group");
    CHECKF(compare(&io, &c, io.c, 16, 32, 0, "second group at wait<0>") == 0, "second group");
    int early_ok = 1, mid_ok = 1;
    for (int l = 0; l < 128; l++)
        for (int i = 0; i < 32; i++) {
            early_ok &= io.early[l][i] == POISON;
            mid_ok &= io.mid[l][i] == POISON;
        }
    CHECKF(early_ok, "accumulators written before any wait");
    CHECKF(mid_ok, "wait<1> completed the newer group too");

    /* The MMA may read B until its wait: overwriting B in between (even
     * after a barrier) races the warpgroup's wgmma. */
    c2 = c;
    build(&io, &c2, 6); /* io.img from seed 6 */
    memcpy(io.img2, io.img, sizeof io.img);
    build(&io, &c, 5);  /* the launch starts with seed 5's tiles */
    EXPECT_FAULT2(WG_LAUNCH(overwrite_kernel, &io), "race", "warpgroup 0's wgmma read");
}

/* ---- shared addresses ------------------------------------------------------ */

__global__ void address_kernel(uint32_t *out)
{
    IG_DYN_SHARED(uint32_t, sm);
    if (threadIdx.x == 0) {
        out[0] = ig_shared_address(sm);
        out[1] = ig_shared_address(sm + 4);
    }
}

/* The dynamic area's shared address: a multiple of 16, never of 1024, and
 * different across seeds; then a 128B-swizzled chain whose image (swizzled
 * as if it started at address 0, the pattern taken from the buffer offset)
 * is copied to the area's start gives wrong products (under a seed whose
 * start is a multiple of 128, so that every read stays inside the image),
 * and the same image at the aligned address gives right ones. */
static void test_addresses(void)
{
    uint32_t got[2];
    unsigned distinct = 0;
    uint32_t seen[64];
    uint64_t seed128 = 0;
    for (uint64_t seed = 0; seed < 130; seed++) {
        ig_emu_set_seed(seed);
        got[0] = got[1] = 1;
        CHECK(IG_LAUNCH(address_kernel, dim3(1), dim3(32), 64, 0, got) == 0);
        CHECKF(got[0] % 16 == 0 && got[0] % 1024 != 0 && got[1] == got[0] + 16,
               "seed %llu: area at shared address %u (+16 bytes at %u)",
               (unsigned long long)seed, got[0], got[1]);
        unsigned i = 0;
        while (i < distinct && seen[i] != got[0])
            i++;
        if (i == distinct && distinct < 64)
            seen[distinct++] = got[0];
        if (!seed128 && got[0] % 128 == 0)
            seed128 = seed;
    }
    CHECKF(distinct >= 32, "only %u distinct shared addresses over 130 seeds", distinct);
    CHECKF(seed128 != 0, "no seed puts the area at a multiple of 128");

    static wg_io io;
    wg_case *c = plain_case(&io, 21);
    io.steps = KDIM / 16;
    io.acc_first = 0;
    ig_emu_set_seed(seed128);
    io.unpadded = 1;
    CHECK(WG_LAUNCH((chain_kernel<ig_bf16_t, 64, 0, 0, 0>), &io) == 0);
    CHECKF(compare(&io, c, io.out, 0, KDIM, 0, NULL) > 0,
           "a swizzled tile not aligned to 1024 bytes of shared address gave right products");
    io.unpadded = 0;
    CHECK(WG_LAUNCH((chain_kernel<ig_bf16_t, 64, 0, 0, 0>), &io) == 0);
    CHECKF(compare(&io, c, io.out, 0, KDIM, 0, "aligned tile") == 0, "aligned tile wrong");
    ig_emu_set_seed(1);
}

/* ---- wgmma.fence ----------------------------------------------------------- */

enum {
    FENCE_NONE,          /* no fence before the first MMA: fault */
    FENCE_WRITTEN,       /* d written after a wait, then an MMA on it, unfenced: fault */
    FENCE_UNTOUCHED,     /* d untouched after the wait, unfenced chain: fine */
    FENCE_TWICE,         /* fence, MMAs, commit, fence, MMAs, commit, wait: fine */
    FENCE_A_WRITTEN,     /* A registers rewritten after a wait, unfenced rs MMA: fault */
    FENCE_FRESH,         /* a new accumulator after a wait, unfenced: fault */
};

__global__ void fence_rule_kernel(wg_io *io, int mode)
{
    IG_DYN_SHARED(uint32_t, sm);
    unsigned l = threadIdx.x;
    const unsigned char *base = copy_in(sm, io->img);
    float d[32], d2[32];
    uint32_t a[4];
    for (int r = 0; r < 4; r++)
        a[r] = io->a_regs[0][l][r];
    auto mma = [&](float (&acc)[32], int step, int accumulate) {
        ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(acc, desc_of(base + A_OFF, io->fa, step),
                                         desc_of(base + B_OFF, io->fb, step), accumulate);
    };
    if (mode != FENCE_NONE)
        ig_wgmma_fence();
    if (mode == FENCE_A_WRITTEN)
        ig_wgmma_rs<ig_bf16_t, 64, 0>(d, a, desc_of(base + B_OFF, io->fb, 0), 0);
    else
        mma(d, 0, 0);
    if (mode == FENCE_TWICE) {
        mma(d, 1, 1);
        ig_wgmma_commit();
        ig_wgmma_fence();
        mma(d, 2, 1);
        mma(d, 3, 1);
    }
    ig_wgmma_commit();
    ig_wgmma_wait<0>();
    if (mode == FENCE_WRITTEN)
        d[5] += 1.0f;
    if (mode == FENCE_A_WRITTEN) {
        for (int r = 0; r < 4; r++)
            a[r] = io->a_regs[1][l][r];
        ig_wgmma_rs<ig_bf16_t, 64, 0>(d, a, desc_of(base + B_OFF, io->fb, 1), 1);
    } else if (mode == FENCE_FRESH) {
        mma(d2, 1, 0);
    } else if (mode != FENCE_TWICE) {
        mma(d, 1, 1);
    }
    ig_wgmma_commit();
    ig_wgmma_wait<0>();
    for (int i = 0; i < 32; i++)
        io->out[l][i] = d[i];
}

/* The ISA asks for a fence between other accesses to an MMA's accumulators
 * or A registers and the MMA (and before the first), not after every wait. */
static void test_fence_rule(void)
{
    static wg_io io;
    wg_case *c = plain_case(&io, 23);
    EXPECT_FAULT(WG_LAUNCH(fence_rule_kernel, &io, FENCE_NONE),
                 "without a wgmma.fence before the warpgroup's first one");
    EXPECT_FAULT2(WG_LAUNCH(fence_rule_kernel, &io, FENCE_WRITTEN),
                  "without a wgmma.fence since the last wait_group", "accumulators that thread");
    EXPECT_FAULT2(WG_LAUNCH(fence_rule_kernel, &io, FENCE_A_WRITTEN),
                  "without a wgmma.fence since the last wait_group", "A registers that thread");
    EXPECT_FAULT2(WG_LAUNCH(fence_rule_kernel, &io, FENCE_FRESH),
                  "without a wgmma.fence since the last wait_group", "no wgmma used before");
    CHECK(WG_LAUNCH(fence_rule_kernel, &io, FENCE_UNTOUCHED) == 0);
    CHECKF(compare(&io, c, io.out, 0, 32, 0, "unfenced chain across a wait") == 0,
           "unfenced chain across a wait");
    CHECK(WG_LAUNCH(fence_rule_kernel, &io, FENCE_TWICE) == 0);
    CHECKF(compare(&io, c, io.out, 0, KDIM, 0, "two fenced groups") == 0, "two fenced groups");
}

/* ---- registers in flight ---------------------------------------------------- */

enum {
    INFLIGHT_WRITE,      /* d written between issue and wait: fault */
    INFLIGHT_TWO_GROUPS, /* two groups on d, wait<1> then wait<0>: fine */
    INFLIGHT_WRITE_MID,  /* ... d written after wait<1>, the second in flight: fault */
    INFLIGHT_A_WRITE,    /* A registers (RS form) written between issue and wait: fault */
    INFLIGHT_A_KEPT,     /* ... written after the wait: fine */
};

__global__ void inflight_kernel(wg_io *io, int mode)
{
    IG_DYN_SHARED(uint32_t, sm);
    unsigned l = threadIdx.x;
    const unsigned char *base = copy_in(sm, io->img);
    float d[32];
    for (int i = 0; i < 32; i++)
        d[i] = io->c[l][i];
    uint32_t a[4];
    for (int r = 0; r < 4; r++)
        a[r] = io->a_regs[0][l][r];
    ig_wgmma_fence();
    if (mode == INFLIGHT_A_WRITE || mode == INFLIGHT_A_KEPT)
        ig_wgmma_rs<ig_bf16_t, 64, 0>(d, a, desc_of(base + B_OFF, io->fb, 0), 1);
    else
        ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d, desc_of(base + A_OFF, io->fa, 0),
                                         desc_of(base + B_OFF, io->fb, 0), 1);
    ig_wgmma_commit();
    if (mode == INFLIGHT_WRITE && l == 77)
        d[3] = 1.0f;
    if (mode == INFLIGHT_A_WRITE && l == 9)
        a[2] ^= 1u;
    if (mode == INFLIGHT_TWO_GROUPS || mode == INFLIGHT_WRITE_MID) {
        ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d, desc_of(base + A_OFF, io->fa, 1),
                                         desc_of(base + B_OFF, io->fb, 1), 1);
        ig_wgmma_commit();
        ig_wgmma_wait<1>();
        if (mode == INFLIGHT_WRITE_MID)
            d[0] = 0.0f;
    }
    ig_wgmma_wait<0>();
    if (mode == INFLIGHT_A_KEPT)
        a[2] ^= 1u;
    for (int i = 0; i < 32; i++)
        io->out[l][i] = d[i];
}

static void test_inflight(void)
{
    static wg_io io;
    wg_case *c = plain_case(&io, 25);
    EXPECT_FAULT2(WG_LAUNCH(inflight_kernel, &io, INFLIGHT_WRITE),
                  "accumulator written while its wgmma was in flight", "thread 77 ");
    EXPECT_FAULT(WG_LAUNCH(inflight_kernel, &io, INFLIGHT_WRITE_MID),
                 "accumulator written while its wgmma was in flight");
    CHECK(WG_LAUNCH(inflight_kernel, &io, INFLIGHT_TWO_GROUPS) == 0);
    CHECKF(compare(&io, c, io.out, 0, 32, 1, "two groups on one accumulator") == 0,
           "two groups on one accumulator");
    EXPECT_FAULT2(WG_LAUNCH(inflight_kernel, &io, INFLIGHT_A_WRITE),
                  "A registers written while their wgmma was in flight", "thread 9 ");
    CHECK(WG_LAUNCH(inflight_kernel, &io, INFLIGHT_A_KEPT) == 0);
}

/* ---- operands checked at issue ---------------------------------------------- */

enum {
    EARLY_BEFORE_BARRIER, /* issued before the barrier after the writes: race */
    EARLY_BEFORE_FENCE,   /* issued before the writers' fence.proxy.async */
    EARLY_CP_ASYNC,       /* issued while the cp.async of the tiles are in flight */
};

/* The MMA is issued before what makes its operands valid, which all happens
 * before its wait: caught at issue. */
__global__ void early_issue_kernel(wg_io *io, int mode)
{
    IG_DYN_SHARED(uint32_t, sm);
    uint32_t *tiles = aligned_tiles(sm);
    const unsigned char *base = (const unsigned char *)tiles;
    for (unsigned i = 4 * threadIdx.x; i < IMG_BYTES / 4; i += 4 * blockDim.x) {
        if (mode == EARLY_CP_ASYNC) {
            ig_cp_async16(&tiles[i], &io->img[i], true);
        } else {
            for (unsigned j = 0; j < 4; j++)
                ig_sts(&tiles[i + j], io->img[i + j]);
        }
    }
    ig_cp_async_commit();
    if (mode == EARLY_BEFORE_BARRIER)
        ig_fence_proxy_async();
    if (mode == EARLY_BEFORE_FENCE)
        ig_syncthreads();
    float d[32];
    ig_wgmma_fence();
    ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d, desc_of(base + A_OFF, io->fa, 0),
                                     desc_of(base + B_OFF, io->fb, 0), 0);
    ig_wgmma_commit();
    ig_cp_async_wait<0>();
    ig_fence_proxy_async();
    ig_syncthreads();
    ig_wgmma_wait<0>();
    for (int i = 0; i < 32; i++)
        io->out[threadIdx.x][i] = d[i];
}

static void test_early_issue(void)
{
    static wg_io io;
    plain_case(&io, 27);
    EXPECT_FAULT(WG_LAUNCH(early_issue_kernel, &io, EARLY_BEFORE_BARRIER),
                 "race: wgmma issue (A operand)");
    EXPECT_FAULT2(WG_LAUNCH(early_issue_kernel, &io, EARLY_BEFORE_FENCE),
                  "wgmma issue (A operand)", "without a fence.proxy.async");
    EXPECT_FAULT2(WG_LAUNCH(early_issue_kernel, &io, EARLY_CP_ASYNC),
                  "wgmma issue (A operand)", "still in flight");
}

/* ---- faults --------------------------------------------------------------- */

__global__ void shape_mismatch_kernel(wg_io *io)
{
    IG_DYN_SHARED(uint32_t, sm);
    const unsigned char *base = copy_in(sm, io->img);
    float d[64];
    ig_wgmma_fence();
    uint64_t ad = desc_of(base + A_OFF, io->fa, 0), bd = desc_of(base + B_OFF, io->fb, 0);
    if (threadIdx.x / 32 == 2)
        ig_wgmma_ss<ig_bf16_t, 64, 0, 0>((float(&)[32])d, ad, bd, 0);
    else
        ig_wgmma_ss<ig_bf16_t, 128, 0, 0>(d, ad, bd, 0);
    ig_wgmma_commit();
    ig_wgmma_wait<0>();
}

__global__ void fence_kernel(wg_io *io)
{
    (void)io;
    ig_wgmma_fence();
}

__global__ void no_wait_kernel(wg_io *io, int commit)
{
    IG_DYN_SHARED(uint32_t, sm);
    const unsigned char *base = copy_in(sm, io->img);
    float d[32];
    ig_wgmma_fence();
    ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d, desc_of(base + A_OFF, io->fa, 0),
                                     desc_of(base + B_OFF, io->fb, 0), 0);
    if (commit)
        ig_wgmma_commit();
}

/* B's descriptor starts `at` bytes after the aligned tiles; skip_b leaves B unwritten. */
__global__ void bad_b_kernel(wg_io *io, uint32_t at, int skip_b)
{
    IG_DYN_SHARED(uint32_t, sm);
    uint32_t *tiles = aligned_tiles(sm);
    const unsigned char *base = (const unsigned char *)tiles;
    unsigned l = threadIdx.x;
    for (unsigned i = l; i < (unsigned)(skip_b ? B_OFF : IMG_BYTES) / 4; i += blockDim.x)
        ig_sts(&tiles[i], io->img[i]);
    ig_fence_proxy_async();
    ig_syncthreads();
    float d[32];
    ig_wgmma_fence();
    ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(
        d, desc_of(base + A_OFF, io->fa, 0),
        ig_wgmma_desc(ig_shared_address(base) + at, io->fb.lbo, io->fb.sbo, io->fb.swizzle), 0);
    ig_wgmma_commit();
    ig_wgmma_wait<0>();
}

/* The tiles are written with the proxy fence missing or before the writes. */
__global__ void unfenced_kernel(wg_io *io, int fence_first)
{
    IG_DYN_SHARED(uint32_t, sm);
    uint32_t *tiles = aligned_tiles(sm);
    const unsigned char *base = (const unsigned char *)tiles;
    if (fence_first)
        ig_fence_proxy_async();
    for (unsigned i = threadIdx.x; i < IMG_BYTES / 4; i += blockDim.x)
        ig_sts(&tiles[i], io->img[i]);
    ig_syncthreads();
    float d[32];
    ig_wgmma_fence();
    ig_wgmma_ss<ig_bf16_t, 64, 0, 0>(d, desc_of(base + A_OFF, io->fa, 0),
                                     desc_of(base + B_OFF, io->fb, 0), 0);
    ig_wgmma_commit();
    ig_wgmma_wait<0>();
}

static void test_faults(void)
{
    static wg_io io;
    static wg_case c;
    const int S = IG_WGMMA_SWIZZLE_128B;
    c = *make_case(true, 64, KMAJ, KMAJ, S, S);
    build(&io, &c, 9);
    EXPECT_FAULT(WG_LAUNCH(shape_mismatch_kernel, &io), "same instruction, shape");
    EXPECT_FAULT(IG_LAUNCH(fence_kernel, dim3(1), dim3(96), 0, 0, &io), "not whole warpgroups");
    EXPECT_FAULT(WG_LAUNCH(no_wait_kernel, &io, 1), "wgmma not waited for");
    EXPECT_FAULT(WG_LAUNCH(no_wait_kernel, &io, 0), "wgmma not waited for");
    EXPECT_FAULT(WG_LAUNCH(bad_b_kernel, &io, (uint32_t)SMEM_BYTES, 0), "outside the");
    EXPECT_FAULT(WG_LAUNCH(bad_b_kernel, &io, (uint32_t)B_OFF, 1), "never written");
    EXPECT_FAULT(WG_LAUNCH(unfenced_kernel, &io, 0), "without a fence.proxy.async");
    EXPECT_FAULT(WG_LAUNCH(unfenced_kernel, &io, 1), "without a fence.proxy.async");
    /* Two warpgroups, both fine: the collectives are per warpgroup. */
    CHECK(IG_LAUNCH(bad_b_kernel, dim3(1), dim3(256), SMEM_BYTES, 0, &io, (uint32_t)B_OFF, 0) == 0);
}

int main(void)
{
    test_layouts();
    test_async();
    test_addresses();
    test_fence_rule();
    test_inflight();
    test_early_issue();
    test_faults();
    return test_summary("test_emu_wgmma");
}
