/* tests/emu/test_emu_warp.cc: the emulator's warp collectives against plain
 * arithmetic: mma.m16n8k16 fragments (scattered with the PTX inverse maps)
 * against a plain matrix product of small integers (exact in bf16, f16 and
 * f32), ldmatrix and .trans layouts (including their pairing with mma), and
 * shfl.sync in its modes and widths; the ldmatrix bank-conflict counter.
 * Label emu. */
#include "core/half.h"
#include "devkit/intrinsics.cuh"
#include "tests/test.h"

#include <stdlib.h>

/* ---- mma with fragments built on the host --------------------------------- */

struct mma_io {
    uint32_t a[32][4], b[32][2];
    float c[32][4], d[32][4];
};

template <class T> __global__ void mma_kernel(mma_io *io)
{
    unsigned l = threadIdx.x;
    float d[4];
    ig_mma_16816<T>(d, io->a[l], io->b[l], io->c[l]);
    for (int i = 0; i < 4; i++)
        io->d[l][i] = d[i];
}

static uint16_t to_half(bool bf16, float v)
{
    return bf16 ? ig_f32_to_bf16(v) : ig_f32_to_f16(v);
}

static void put_half(uint32_t *reg, int half, uint16_t h)
{
    *reg = half ? ((*reg & 0xffffu) | (uint32_t)h << 16) : ((*reg & 0xffff0000u) | h);
}

template <class T> static void test_mma(bool bf16)
{
    static mma_io io;
    float A[16][16], B[16][8], C[16][8];
    srand(bf16 ? 1 : 2);
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++)
            A[r][k] = (float)(rand() % 17 - 8);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++)
            B[k][n] = (float)(rand() % 17 - 8);
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++)
            C[r][n] = (float)(rand() % 101 - 50);
    /* Inverse maps from the fact sheet: where each element lives. */
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            put_half(&io.a[4 * (r % 8) + (c % 8) / 2][2 * (c / 8) + r / 8], c % 2,
                     to_half(bf16, A[r][c]));
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++)
            put_half(&io.b[4 * n + (k % 8) / 2][k / 8], k % 2, to_half(bf16, B[k][n]));
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++)
            io.c[4 * (r % 8) + c / 2][2 * (r / 8) + c % 2] = C[r][c];
    CHECK(IG_LAUNCH(mma_kernel<T>, dim3(1), dim3(32), 0, 0, &io) == 0);
    int bad = 0;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) {
            float want = C[r][c];
            for (int k = 0; k < 16; k++)
                want += A[r][k] * B[k][c];
            float got = io.d[4 * (r % 8) + c / 2][2 * (r / 8) + c % 2];
            if (got != want && bad++ < 5)
                fprintf(stderr, "mma %s D[%d][%d] = %g, want %g\n", bf16 ? "bf16" : "f16", r, c,
                        got, want);
        }
    CHECKF(bad == 0, "%d wrong elements", bad);
    /* The fact sheet's worked example, lane 31: a0 = A[7][6], b0 = B[6][7],
     * c0 = C[7][6]. */
    CHECK((io.a[31][0] & 0xffff) == to_half(bf16, A[7][6]));
    CHECK((io.a[31][3] >> 16) == to_half(bf16, A[15][15]));
    CHECK((io.b[31][0] & 0xffff) == to_half(bf16, B[6][7]));
    CHECK((io.b[31][1] >> 16) == to_half(bf16, B[15][7]));
}

/* ---- ldmatrix against the fragments, and feeding mma ---------------------- */

struct ldsm_io {
    uint16_t a[16][16];            /* A[m][k] row-major */
    uint16_t bt[16][16];           /* B^T[n][k]: 16 n rows, k contiguous */
    uint16_t bk[16][16];           /* B[k][n]: k rows, n contiguous (16 n) */
    uint32_t ra[32][4], rbt[32][4], rbk[32][4];
    uint32_t x1[32], x2[32][2], x1t[32], x2t[32][2];
    float d[32][4], d2[32][4];
};

__global__ void ldsm_kernel(ldsm_io *io)
{
    IG_SHARED(uint16_t, sa, [16][16]);
    IG_SHARED(uint16_t, sbt, [16][16]);
    IG_SHARED(uint16_t, sbk, [16][16]);
    unsigned l = threadIdx.x;
    for (int i = 0; i < 8; i++) {
        int e = (int)l * 8 + i;
        ig_sts(&sa[e / 16][e % 16], io->a[e / 16][e % 16]);
        ig_sts(&sbt[e / 16][e % 16], io->bt[e / 16][e % 16]);
        ig_sts(&sbk[e / 16][e % 16], io->bk[e / 16][e % 16]);
    }
    ig_syncthreads();
    /* The pairings of fact-sheet section 2.3. */
    ig_ldmatrix_x4(io->ra[l], &sa[l % 16][8 * (l / 16)]);
    ig_ldmatrix_x4(io->rbt[l], &sbt[l % 8 + 8 * (l / 16)][8 * ((l / 8) % 2)]);
    ig_ldmatrix_x4_trans(io->rbk[l], &sbk[l % 16][8 * (l / 16)]);
    ig_ldmatrix_x1(&io->x1[l], &sa[l % 8][0]);
    ig_ldmatrix_x2(io->x2[l], &sa[l % 16][0]);
    ig_ldmatrix_x1_trans(&io->x1t[l], &sa[l % 8][0]);
    ig_ldmatrix_x2_trans(io->x2t[l], &sa[l % 16][0]);
    float zero[4] = {0, 0, 0, 0};
    ig_mma_16816<ig_bf16_t>(io->d[l], io->ra[l], &io->rbt[l][0], zero);
    ig_mma_16816<ig_bf16_t>(io->d2[l], io->ra[l], &io->rbk[l][2], zero);
}

static void test_ldmatrix(void)
{
    static ldsm_io io;
    float A[16][16], B[16][16]; /* B[k][n], 16 columns = two n8 tiles */
    srand(3);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            A[r][c] = (float)(rand() % 15 - 7);
            B[r][c] = (float)(rand() % 15 - 7);
            io.a[r][c] = ig_f32_to_bf16(A[r][c]);
            io.bk[r][c] = ig_f32_to_bf16(B[r][c]);
            io.bt[c][r] = ig_f32_to_bf16(B[r][c]);
        }
    CHECK(IG_LAUNCH(ldsm_kernel, dim3(1), dim3(32), 0, 0, &io) == 0);
    int bad = 0;
    for (unsigned l = 0; l < 32; l++) {
        unsigned g = l / 4, t = l % 4;
        for (int e = 0; e < 8; e++) { /* A fragment (mma table) */
            uint16_t want = io.a[g + 8 * ((e / 2) % 2)][2 * t + e % 2 + 8 * (e / 4)];
            bad += (uint16_t)(io.ra[l][e / 2] >> (16 * (e % 2))) != want;
        }
        for (int tile = 0; tile < 2; tile++)
            for (int e = 0; e < 4; e++) { /* B fragment of n-tile `tile` */
                uint16_t want = io.bk[2 * t + e % 2 + 8 * (e / 2)][8 * tile + g];
                bad += (uint16_t)(io.rbt[l][2 * tile + e / 2] >> (16 * (e % 2))) != want;
                bad += (uint16_t)(io.rbk[l][2 * tile + e / 2] >> (16 * (e % 2))) != want;
            }
        /* x1/x2 plain and transposed: matrix m = rows 8m..8m+7, cols 0..7. */
        for (int m = 0; m < 2; m++)
            for (int h = 0; h < 2; h++) {
                uint16_t plain = io.a[8 * m + g][2 * t + h];
                uint16_t trans = io.a[8 * m + 2 * t + h][g];
                uint32_t rx = m ? io.x2[l][1] : io.x1[l], rt = m ? io.x2t[l][1] : io.x1t[l];
                bad += (uint16_t)(rx >> (16 * h)) != plain;
                bad += (uint16_t)(rt >> (16 * h)) != trans;
                bad += (uint16_t)(io.x2[l][m] >> (16 * h)) != plain;
                bad += (uint16_t)(io.x2t[l][m] >> (16 * h)) != trans;
            }
    }
    CHECKF(bad == 0, "%d ldmatrix elements in the wrong place", bad);
    bad = 0;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) {
            float w0 = 0, w1 = 0;
            for (int k = 0; k < 16; k++) {
                w0 += A[r][k] * B[k][c];
                w1 += A[r][k] * B[k][8 + c];
            }
            int l = 4 * (r % 8) + c / 2, e = 2 * (r / 8) + c % 2;
            bad += io.d[l][e] != w0;
            bad += io.d2[l][e] != w1;
        }
    CHECKF(bad == 0, "%d elements of ldmatrix-fed mma wrong", bad);
}

/* ---- bank conflicts of ldmatrix ------------------------------------------- */

static int pitch_padded;

/* One ldmatrix.x1 over 8 rows of a 128-byte-pitch tile (all rows in one
 * 16-byte bank group: 8-way conflict) or a 144-byte one (conflict-free). */
__global__ void conflict_kernel(int unused)
{
    (void)unused;
    IG_SHARED(uint16_t, plain, [8][64]);
    IG_SHARED(uint16_t, padded, [8][72]);
    unsigned l = threadIdx.x;
    for (int i = 0; i < 16; i++) {
        ig_sts(&plain[l % 8][8 * (l / 8) + i % 8], (uint16_t)i);
        ig_sts(&padded[l % 8][8 * (l / 8) + i % 8], (uint16_t)i);
    }
    ig_syncthreads();
    uint32_t r[1];
    ig_ldmatrix_x1(r, pitch_padded ? &padded[l % 8][0] : &plain[l % 8][0]);
}

static void test_bank_conflicts(void)
{
    pitch_padded = 0;
    CHECK(IG_LAUNCH(conflict_kernel, dim3(1), dim3(32), 0, 0, 0) == 0);
    CHECKF(ig_emu_last_stats().ldmatrix_conflicts == 7, "%llu",
           (unsigned long long)ig_emu_last_stats().ldmatrix_conflicts);
    pitch_padded = 1;
    CHECK(IG_LAUNCH(conflict_kernel, dim3(1), dim3(32), 0, 0, 0) == 0);
    CHECK(ig_emu_last_stats().ldmatrix_conflicts == 0);
}

/* ---- shuffles ------------------------------------------------------------- */

struct shfl_io {
    uint32_t v[32];
    uint32_t xr[32][32];     /* xor, width 32, masks 0..31 */
    uint32_t idx[32][32];    /* idx, width 32, sources 0..31 */
    uint32_t xw8[32][8];     /* xor, width 8 */
    uint32_t up[32], down[32], idx8[32];
    float red[32];
};

__global__ void shfl_kernel(shfl_io *io)
{
    unsigned l = threadIdx.x;
    uint32_t v = io->v[l];
    for (int m = 0; m < 32; m++)
        io->xr[l][m] = ig_shfl_xor(v, m);
    for (int s = 0; s < 32; s++)
        io->idx[l][s] = ig_shfl_idx(v, (s + (int)l) % 32);
    for (int m = 0; m < 8; m++)
        io->xw8[l][m] = ig_emu_shfl(IG_EMU_SHFL_BFLY, ~0u, v, (uint32_t)m * 3, (24u << 8) | 31u);
    io->up[l] = ig_emu_shfl(IG_EMU_SHFL_UP, ~0u, v, 3, 0);
    io->down[l] = ig_shfl_down(v, 5);
    io->idx8[l] = ig_emu_shfl(IG_EMU_SHFL_IDX, ~0u, v, 9, (24u << 8) | 31u);
    /* The FA2 quad reduction: rows shared by lanes 4g..4g+3. */
    float x = (float)(v % 1000);
    x += ig_shfl_xor_f32(x, 2);
    x += ig_shfl_xor_f32(x, 1);
    io->red[l] = x;
}

static void test_shfl(void)
{
    static shfl_io io;
    for (int l = 0; l < 32; l++)
        io.v[l] = 1000u * (uint32_t)l + 7u;
    CHECK(IG_LAUNCH(shfl_kernel, dim3(1), dim3(32), 0, 0, &io) == 0);
    int bad = 0;
    for (unsigned l = 0; l < 32; l++) {
        for (unsigned m = 0; m < 32; m++)
            bad += io.xr[l][m] != io.v[l ^ m];
        for (unsigned s = 0; s < 32; s++)
            bad += io.idx[l][s] != io.v[(s + l) % 32];
        for (unsigned m = 0; m < 8; m++) { /* width 8: a later group reads itself */
            unsigned j = l ^ (m * 3);
            bad += io.xw8[l][m] != (j / 8 > l / 8 ? io.v[l] : io.v[j]);
        }
        bad += io.up[l] != (l >= 3 ? io.v[l - 3] : io.v[l]);
        bad += io.down[l] != (l + 5 < 32 ? io.v[l + 5] : io.v[l]);
        bad += io.idx8[l] != io.v[(l / 8) * 8 + 1]; /* 9 within a segment of 8 = 1 */
        float want = 0;
        for (unsigned q = 0; q < 4; q++)
            want += (float)(io.v[(l & ~3u) + q] % 1000);
        bad += io.red[l] != want;
    }
    CHECKF(bad == 0, "%d shuffle results wrong", bad);
}

/* ---- votes ---------------------------------------------------------------- */

struct vote_io {
    uint32_t pattern[4];             /* which lanes of warp 0 vote true, per round */
    uint32_t any[2][4][32], ballot[2][4][32];
};

/* Warp 1 votes the complement of warp 0: votes must not mix warps. */
__global__ void vote_kernel(vote_io *io)
{
    unsigned l = threadIdx.x % 32, w = threadIdx.x / 32;
    for (int r = 0; r < 4; r++) {
        bool pred = (((io->pattern[r] >> l) & 1u) != 0) != (w == 1);
        io->any[w][r][l] = ig_vote_any(pred);
        io->ballot[w][r][l] = ig_vote_ballot(pred);
    }
}

static void test_vote(void)
{
    static vote_io io;
    const uint32_t patterns[4] = {0u, 1u << 17, 0xffffffffu, 0x0f0f1234u};
    memcpy(io.pattern, patterns, sizeof patterns);
    CHECK(IG_LAUNCH(vote_kernel, dim3(1), dim3(64), 0, 0, &io) == 0);
    int bad = 0;
    for (int w = 0; w < 2; w++)
        for (int r = 0; r < 4; r++) {
            uint32_t want = w ? ~patterns[r] : patterns[r];
            for (int l = 0; l < 32; l++) {
                bad += io.any[w][r][l] != (uint32_t)(want != 0);
                bad += io.ballot[w][r][l] != want;
            }
        }
    CHECKF(bad == 0, "%d vote results wrong", bad);
}

int main(void)
{
    test_mma<ig_bf16_t>(true);
    test_mma<ig_f16_t>(false);
    test_ldmatrix();
    test_shfl();
    test_vote();
    test_bank_conflicts();
    return test_summary("test_emu_warp");
}
