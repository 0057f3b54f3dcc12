/* tests/emu/test_decode_attn_mutants.cc: the decode attention
 * (decode/decode_attn.cu) with one bug planted at a time (copies made by
 * tests/emu/mutate.cmake's dec_* at build time) must be caught, on one
 * sequence of 5 query rows at positions 126..130 (a verify step; 2 splits
 * of 66 keys, 2 pipeline stages each at head_dim 64): a row that sees the
 * next row's key (causality among the rows broken) comes out off the CPU
 * twin; a stage read before its cp.async wait is a fault of the
 * emulator's (a read of shared memory a copy still has in flight). With
 * gpt-oss's sinks on the same case: a sink added once a split (here twice)
 * or left out of the denominator comes out off the twin. The unmutated
 * kernel on the same cases matches the twin. Label emu. */
#include "decode/decode_attn.h"
#include "tests/emu/expect_fault.h"
#include "tests/test.h"

#include "core/half.h"

#include <string.h>

extern "C" int decode_attn_emu_dec_row_past(const struct decode_attn_params *p, void *stream);
extern "C" int decode_attn_emu_dec_no_wait(const struct decode_attn_params *p, void *stream);
extern "C" int decode_attn_emu_dec_sink_per_split(const struct decode_attn_params *p,
                                                  void *stream);
extern "C" int decode_attn_emu_dec_sink_dropped(const struct decode_attn_params *p,
                                                void *stream);

enum { HD = 64, ROWS = 5, HEADS = 2, CTX = 192, SPLITS = 2 };

/* Outputs more than 2 f16 ulps (or 1e-6) apart; NaN counts. */
static int count_off(const uint16_t *a, const uint16_t *b, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const double x = ig_f16_to_f32(a[i]), y = ig_f16_to_f32(b[i]);
        const double ulp = ldexp(1.0, ilogb(fmax(fmax(fabs(x), fabs(y)), 6.2e-5)) - 10);
        bad += !(fabs(x - y) <= 2 * ulp + 1e-6);
    }
    return bad;
}

int main(void)
{
    uint64_t rng = 7;
    static uint16_t q[ROWS * HEADS * HD], kc[CTX * HD], vc[CTX * HD], o[ROWS * HEADS * HD],
        o_ref[ROWS * HEADS * HD];
    static int32_t table[3] = {2, 0, 1}, pos[ROWS] = {126, 127, 128, 129, 130};
    static float work[ROWS * HEADS * SPLITS * (HD + 2)];
    for (uint16_t &x : q)
        x = ig_f32_to_f16(2.0f * test_rand_f(&rng));
    for (int i = 0; i < CTX * HD; i++) {
        kc[i] = ig_f32_to_f16(test_rand_f(&rng));
        vc[i] = ig_f32_to_f16(test_rand_f(&rng));
    }
    struct decode_attn_params p = {};
    p.q = q, p.k_cache = kc, p.v_cache = vc, p.block_table = table, p.table_stride = 3;
    p.block_stride = 64 * HD, p.head_stride = 64 * HD, p.pos = pos, p.o = o_ref, p.work = work;
    p.n_seqs = 1, p.n_head = HEADS, p.n_head_kv = 1, p.head_dim = HD, p.n_ctx = CTX;
    p.n_splits = SPLITS, p.scale = 0.125f, p.q_len = ROWS;
    CHECK(decode_attn_work_floats(&p) <= sizeof work / sizeof work[0]);
    CHECK(decode_attn_ref(&p) == 0);
    const int n = ROWS * HEADS * HD;
    p.o = o;
    CHECK(decode_attn_emu(&p, NULL) == 0);
    CHECKF(count_off(o, o_ref, n) == 0, "the unmutated kernel is off the twin");
    memset(o, 0xff, sizeof o);
    CHECK(decode_attn_emu_dec_row_past(&p, NULL) == 0);
    CHECKF(count_off(o, o_ref, n) > 0,
           "mutant dec_row_past (a row sees the next row's key) went unnoticed");
    EXPECT_FAULT(decode_attn_emu_dec_no_wait(&p, NULL), "still in flight");

    /* Sinks near the scores' scale: each one's term a visible share. */
    static const float sinks[HEADS] = {0.5f, 2.0f};
    p.sinks = sinks, p.o = o_ref;
    CHECK(decode_attn_ref(&p) == 0);
    p.o = o;
    CHECK(decode_attn_emu(&p, NULL) == 0);
    CHECKF(count_off(o, o_ref, n) == 0, "the unmutated kernel with sinks is off the twin");
    memset(o, 0xff, sizeof o);
    CHECK(decode_attn_emu_dec_sink_per_split(&p, NULL) == 0);
    CHECKF(count_off(o, o_ref, n) > 0, "mutant dec_sink_per_split went unnoticed");
    memset(o, 0xff, sizeof o);
    CHECK(decode_attn_emu_dec_sink_dropped(&p, NULL) == 0);
    CHECKF(count_off(o, o_ref, n) > 0, "mutant dec_sink_dropped went unnoticed");
    return test_summary("test_decode_attn_mutants");
}
