/* prefill/attn_v8.h: the eight-float vectors of the CPU attention kernels
 * (prefill/attn_tiled.c, prefill/attn_decode.c; sixteen-float ones for
 * their AVX-512 forms) and their lane sums in one fixed order, shared so
 * that every kernel reduces a score the same way and gives the same bits.
 * Covered by tests/cpu/test_attn_tiled.c. */
#ifndef IGNITE_PREFILL_ATTN_V8_H
#define IGNITE_PREFILL_ATTN_V8_H

/* Eight floats; unaligned loads and stores through the _u type. Macros, not
 * functions: a function passing 32-byte vectors would change its ABI between
 * the baseline and the AVX2 clone. */
typedef float attn_v8 __attribute__((vector_size(32)));
typedef float attn_v8u __attribute__((vector_size(32), aligned(4)));
#define v8_load(p) (*(const attn_v8u *)(const void *)(p))
#define v8_store(p, v) (*(attn_v8u *)(void *)(p) = (v))
typedef double attn_d4 __attribute__((vector_size(32))); /* 64-bit halves, for one vpermpd */
/* Sixteen floats (and eight doubles), for the AVX-512 forms: one zmm. */
typedef float attn_v16 __attribute__((vector_size(64)));
typedef float attn_v16u __attribute__((vector_size(64), aligned(4)));
typedef double attn_d8 __attribute__((vector_size(64)));
#define v16_load(p) (*(const attn_v16u *)(const void *)(p))
#define v16_store(p, v) (*(attn_v16u *)(void *)(p) = (v))
typedef float attn_v4u __attribute__((vector_size(16), aligned(4)));
#define v4_store(p, v) (*(attn_v4u *)(void *)(p) = (v))
/* The lanes' sum in one fixed order, whatever the caller. */
#define v8_sum(a)                                                                          \
    ((((a)[0] + (a)[4]) + ((a)[2] + (a)[6])) + (((a)[1] + (a)[5]) + ((a)[3] + (a)[7])))

/* Lane sums of eight vectors at once, each in v8_sum's order, with shuffles
 * that stay inside 128-bit lanes until one last 64-bit permute (no
 * shuffle-control constants: those took four registers from the score
 * loops, which then loaded each K row twice). v8_pairs adds lanes i and
 * i + 4 of a and of b ([a, b] halves); v8_quads adds pairs 0 + 2 and 1 + 3
 * of each 128-bit lane ((0+4) + (2+6) and (1+5) + (3+7)); the last step of
 * v8_sums8 adds those two. The same additions as v8_sum, so the same bits. */
#define v8_shuf(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define v8_pairs(a, b) (v8_shuf(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + v8_shuf(a, b, 4, 5, 6, 7, 12, 13, 14, 15))
#define v8_quads(u, w) (v8_shuf(u, w, 0, 1, 8, 9, 4, 5, 12, 13) + v8_shuf(u, w, 2, 3, 10, 11, 6, 7, 14, 15))

/* out = [v8_sum(a0), .., v8_sum(a3), v8_sum(b0), .., v8_sum(b3)]. The pairs
 * go (a0, a2), (a1, a3) so that za holds [a0 a0 a1 a1 | a2 a2 a3 a3]; the
 * sum z is [a0 a1 b0 b1 | a2 a3 b2 b3], put in order by 64-bit halves. */
#define v8_sums8(a0, a1, a2, a3, b0, b1, b2, b3, out)                                           \
    do {                                                                                       \
        attn_v8 za_ = v8_quads(v8_pairs(a0, a2), v8_pairs(a1, a3));                            \
        attn_v8 zb_ = v8_quads(v8_pairs(b0, b2), v8_pairs(b1, b3));                            \
        attn_v8 z_ = v8_shuf(za_, zb_, 0, 2, 8, 10, 4, 6, 12, 14) +                            \
                     v8_shuf(za_, zb_, 1, 3, 9, 11, 5, 7, 13, 15);                             \
        (out) = (attn_v8)v8_shuf((attn_d4)z_, (attn_d4)z_, 0, 2, 1, 3);                        \
    } while (0)

#endif
