/* tests/emu/test_decode_attn_mutants.cc: the decode attention
 * (decode/decode_attn.cu) with one bug planted at a time (copies made by
 * tests/emu/mutate.cmake's dec_* at build time) must be caught, on one
 * sequence of 5 query rows at positions 126..130 (a verify step; 2 splits
 * of 66 keys, 2 pipeline stages each at head_dim 64): a row that sees the
 * next row's key (causality among the rows broken) comes out off the CPU
 * twin; a stage read before its cp.async wait is a fault of the
 * emulator's (a read of shared memory a copy still has in flight). With
 * gpt-oss's sinks on the same case: a sink added once a split (here twice)
 * or left out of the denominator comes out off the twin. At head dim 512
 * (Gemma 4): lanes that merge only the first of their two 16-byte chunks
 * come out off the twin. The unmutated kernel on the same cases matches
 * the twin. Label emu. */
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
extern "C" int decode_attn_emu_dec_half_head(const struct decode_attn_params *p,
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

    /* Head dim 512 (Gemma 4's global layers: 8 query heads on 1 KV head, 2
     * splits): the unmutated kernel matches the twin; one whose lanes merge
     * only their first 8 dims (the second 256 columns never merged) not. */
    enum { HD5 = 512, H5 = 8, CTX5 = 128 };
    static uint16_t q5[H5 * HD5], kc5[CTX5 * HD5], vc5[CTX5 * HD5], o5[H5 * HD5],
        o5_ref[H5 * HD5];
    static int32_t table5[2] = {1, 0}, pos5[1] = {100};
    static float work5[H5 * SPLITS * (HD5 + 2)];
    for (uint16_t &x : q5)
        x = ig_f32_to_f16(test_rand_f(&rng));
    for (int i = 0; i < CTX5 * HD5; i++) {
        kc5[i] = ig_f32_to_f16(test_rand_f(&rng));
        vc5[i] = ig_f32_to_f16(test_rand_f(&rng));
    }
    struct decode_attn_params p5 = {};
    p5.q = q5, p5.k_cache = kc5, p5.v_cache = vc5, p5.block_table = table5, p5.table_stride = 2;
    p5.block_stride = 64 * HD5, p5.head_stride = 64 * HD5, p5.pos = pos5, p5.o = o5_ref;
    p5.work = work5, p5.n_seqs = 1, p5.n_head = H5, p5.n_head_kv = 1, p5.head_dim = HD5;
    p5.n_ctx = CTX5, p5.n_splits = SPLITS, p5.scale = 1.0f / 16;
    CHECK(decode_attn_work_floats(&p5) <= sizeof work5 / sizeof work5[0]);
    CHECK(decode_attn_ref(&p5) == 0);
    p5.o = o5;
    CHECK(decode_attn_emu(&p5, NULL) == 0);
    CHECKF(count_off(o5, o5_ref, H5 * HD5) == 0, "the unmutated kernel at hd 512 is off the twin");
    memset(o5, 0xff, sizeof o5);
    CHECK(decode_attn_emu_dec_half_head(&p5, NULL) == 0);
    CHECKF(count_off(o5, o5_ref, H5 * HD5) > 0,
           "mutant dec_half_head (hd 512's second half never merged) went unnoticed");
    return test_summary("test_decode_attn_mutants");
}
