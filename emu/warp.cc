/* emu/warp.cc: the math of warp collectives once all 32 lanes have arrived:
 * mma.m16n8k16 (bf16/f16 in, f32 accumulate), ldmatrix (x1/x2/x4, .trans) and
 * shfl.sync, each lane's element in the register and half-word PTX gives it.
 *
 * Layouts (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point
 * type" and "ldmatrix"; l = lane, g = l/4, t = l%4; element 2i in bits 15:0
 * of register i, 2i+1 in bits 31:16):
 *   A 16x16: a_e = A[g + 8*((e/2)%2)][2t + e%2 + 8*(e/4)], e = 0..7
 *   B 16x8:  b_e = B[2t + e%2 + 8*(e/2)][g],               e = 0..3
 *   C 16x8:  c_e = C[g + 8*(e/2)][2t + e%2],                e = 0..3
 *   ldmatrix: lane 8m+r gives row r of matrix m; register m of lane l holds
 *   M_m[g][2t], M_m[g][2t+1] (.trans: M_m[2t][g], M_m[2t+1][g]).
 * Products of bf16/f16 are exact in double; the sum is rounded to f32 once
 * (the hardware's order and rounding are unspecified, see the fact sheet).
 * Covered by tests/emu/test_emu_warp.cc. */
#include "core/half.h"
#include "emu/internal.h"

#include <string.h>

#define EMU_WARP 32u

EMU_NO_SANITIZE static float emu_half(int kind, uint16_t h)
{
    return kind == IG_EMU_MMA_BF16 ? ig_bf16_to_f32(h) : ig_f16_to_f32(h);
}

/* The math of emu_mma on copies of the lanes' registers: the emulator's own
 * arrays only, hence no ASan instrumentation (EMU_NO_SANITIZE). */
EMU_NO_SANITIZE static void emu_mma_math(int kind, const uint32_t (*a)[4], const uint32_t (*b)[2],
                                     const float (*c)[4], float (*d)[4])
{
    float A[16][16], B[16][8], C[16][8];
    for (unsigned l = 0; l < EMU_WARP; l++) {
        unsigned g = l / 4, t = l % 4;
        for (unsigned e = 0; e < 8; e++) {
            uint16_t h = (uint16_t)(a[l][e / 2] >> (16 * (e % 2)));
            A[g + 8 * ((e / 2) % 2)][2 * t + e % 2 + 8 * (e / 4)] = emu_half(kind, h);
        }
        for (unsigned e = 0; e < 4; e++) {
            uint16_t h = (uint16_t)(b[l][e / 2] >> (16 * (e % 2)));
            B[2 * t + e % 2 + 8 * (e / 2)][g] = emu_half(kind, h);
        }
        for (unsigned e = 0; e < 4; e++)
            C[g + 8 * (e / 2)][2 * t + e % 2] = c[l][e];
    }
    for (unsigned l = 0; l < EMU_WARP; l++) {
        unsigned g = l / 4, t = l % 4;
        for (unsigned e = 0; e < 4; e++) {
            unsigned r = g + 8 * (e / 2), n = 2 * t + e % 2;
            double s = C[r][n];
            for (unsigned kk = 0; kk < 16; kk++)
                s += (double)A[r][kk] * (double)B[kk][n];
            d[l][e] = (float)s;
        }
    }
}

/* The lanes' registers (kernel memory: ASan checks these copies). */
static void emu_mma(struct emu_thread *lane0, int kind)
{
    uint32_t a[EMU_WARP][4], b[EMU_WARP][2];
    float c[EMU_WARP][4], d[EMU_WARP][4];
    for (unsigned l = 0; l < EMU_WARP; l++) {
        const struct emu_coll *k = &lane0[l].coll;
        memcpy(a[l], k->in[0], sizeof a[l]);
        memcpy(b[l], k->in[1], sizeof b[l]);
        memcpy(c[l], k->in[2], sizeof c[l]);
    }
    emu_mma_math(kind, a, b, c, d);
    for (unsigned l = 0; l < EMU_WARP; l++)
        memcpy(lane0[l].coll.out, d[l], sizeof d[l]);
}

static void emu_ldmatrix(struct emu_thread *lane0, int num, int trans)
{
    if (num != 1 && num != 2 && num != 4)
        emu_fail("ldmatrix .x%d", num);
    uint16_t M[4][8][8];
    for (int m = 0; m < num; m++) {
        unsigned groups[8] = {0};
        const void *rows[8];
        for (unsigned r = 0; r < 8; r++) {
            struct emu_thread *src = &lane0[8 * m + r];
            const void *row = src->coll.in[0];
            if ((uintptr_t)row & 15)
                emu_fail("ldmatrix row address %p (lane %u) is not 16-byte aligned", row,
                         8 * m + r);
            emu_smem_thread_read(src, row, 16, "ldmatrix");
            memcpy(M[m][r], row, 16);
            /* Bank group of the row; the same address twice is a broadcast. */
            rows[r] = row;
            int dup = 0;
            for (unsigned q = 0; q < r; q++)
                dup |= rows[q] == row;
            if (!dup) {
                const struct emu_smem *s = emu_smem_find(row, 16, "ldmatrix");
                groups[((size_t)((const unsigned char *)row - s->data) / 16) % 8]++;
            }
        }
        unsigned worst = 0;
        for (unsigned q = 0; q < 8; q++)
            worst = groups[q] > worst ? groups[q] : worst;
        emu.stats.ldmatrix_conflicts += worst - 1;
    }
    for (unsigned l = 0; l < EMU_WARP; l++) {
        uint32_t *out = (uint32_t *)lane0[l].coll.out;
        unsigned g = l / 4, t = l % 4;
        for (int m = 0; m < num; m++) {
            uint16_t lo = trans ? M[m][2 * t][g] : M[m][g][2 * t];
            uint16_t hi = trans ? M[m][2 * t + 1][g] : M[m][g][2 * t + 1];
            out[m] = (uint32_t)lo | (uint32_t)hi << 16;
        }
    }
}

/* shfl.sync per PTX: c[4:0] clamp, c[12:8] segment mask; a lane whose source
 * is out of range gets its own value. */
static void emu_shfl(struct emu_thread *lane0, int mode)
{
    uint32_t in[EMU_WARP];
    for (unsigned l = 0; l < EMU_WARP; l++)
        in[l] = lane0[l].coll.v;
    for (unsigned l = 0; l < EMU_WARP; l++) {
        const struct emu_coll *k = &lane0[l].coll;
        uint32_t seg = (k->c >> 8) & 31u, clamp = k->c & 31u, b = k->b & 31u;
        uint32_t max_lane = (l & seg) | (clamp & ~seg), min_lane = l & seg;
        uint32_t j = 0;
        int ok = 0;
        switch (mode) {
        case IG_EMU_SHFL_UP:
            j = l - b;
            ok = (int)j >= (int)max_lane;
            break;
        case IG_EMU_SHFL_DOWN:
            j = l + b;
            ok = j <= max_lane;
            break;
        case IG_EMU_SHFL_BFLY:
            j = l ^ b;
            ok = j <= max_lane;
            break;
        default:
            j = min_lane | (b & ~seg);
            ok = j <= max_lane;
            break;
        }
        *(uint32_t *)k->out = ok ? in[j] : in[l];
    }
}

/* vote.sync over the warp: every lane gets the same answer. */
static void emu_vote(struct emu_thread *lane0, int mode)
{
    uint32_t ballot = 0;
    for (unsigned l = 0; l < EMU_WARP; l++)
        ballot |= (lane0[l].coll.v & 1u) << l;
    uint32_t r = mode == IG_EMU_VOTE_BALLOT ? ballot
                 : mode == IG_EMU_VOTE_ANY  ? (uint32_t)(ballot != 0)
                                            : (uint32_t)(ballot == 0xffffffffu);
    for (unsigned l = 0; l < EMU_WARP; l++)
        *(uint32_t *)lane0[l].coll.out = r;
}

/* __syncwarp: each lane is ordered after every lane's earlier accesses. */
static void emu_syncwarp(struct emu_block *b, struct emu_thread *lane0)
{
    std::vector<uint32_t> &j = b->join;
    j.assign(b->n_agents, 0u);
    for (unsigned l = 0; l < EMU_WARP; l++)
        emu_vc_join(j, lane0[l].vc);
    for (unsigned l = 0; l < EMU_WARP; l++) {
        lane0[l].vc = j;
        emu_vc_tick(&lane0[l]);
    }
}

void emu_warp_compute(struct emu_block *b, unsigned w)
{
    struct emu_thread *lane0 = &(*b->threads)[w * EMU_WARP];
    const struct emu_coll *k0 = &lane0[0].coll;
    static const char *names[] = {"?", "mma", "ldmatrix", "shfl", "vote", "__syncwarp"};
    for (unsigned l = 1; l < EMU_WARP; l++) {
        const struct emu_coll *k = &lane0[l].coll;
        if (k->op != k0->op || k->kind != k0->kind || k->mask != k0->mask)
            emu_fail("warp %u: lane %u is in %s while lane 0 is in %s (a collective must be "
                     "the same instruction in all lanes)", w, l, names[k->op], names[k0->op]);
    }
    switch (k0->op) {
    case EMU_OP_MMA:
        emu_mma(lane0, k0->kind);
        break;
    case EMU_OP_LDSM:
        emu_ldmatrix(lane0, k0->kind & 15, k0->kind >> 4);
        break;
    case EMU_OP_SHFL:
        if (k0->mask != 0xffffffffu)
            emu_fail("shfl.sync with mask %08x: only the full mask is emulated", k0->mask);
        emu_shfl(lane0, k0->kind);
        break;
    case EMU_OP_VOTE:
        if (k0->mask != 0xffffffffu)
            emu_fail("vote.sync with mask %08x: only the full mask is emulated", k0->mask);
        emu_vote(lane0, k0->kind);
        break;
    case EMU_OP_SYNCWARP:
        emu_syncwarp(b, lane0);
        break;
    default:
        emu_fail("unknown collective %d", k0->op);
    }
}
