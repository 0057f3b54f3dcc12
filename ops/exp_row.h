/* ops/exp_row.h: e^(s_c - max) over a row (the softmax's scores, the
 * gates' sigmoids), vectorized where the CPU allows: bit for bit what the
 * C library's expf gives, or for the int8 path's softmax a polynomial
 * within 2 ulp. Covered by tests/cpu/test_exp_row.c. */
#ifndef IGNITE_OPS_EXP_ROW_H
#define IGNITE_OPS_EXP_ROW_H

#include <stdint.h>

/* s[c] = expf(s[c] - mx) for 0 <= c < n. */
void ops_exp_row(float *s, int64_t n, float mx);

/* s[c] = e^(s[c] - mx) for 0 <= c < n: where AVX2 and FMA run, a
 * polynomial in float within 2 ulp, 0 where s[c] - mx < -86 and +inf where
 * it is above 88; expf elsewhere. The attention (prefill/attn_fused.h) and
 * the gates of the int8 path; ops_exp_row's bits are the exact path's. */
void ops_exp_row_fused(float *s, int64_t n, float mx);

/* The two above over `rows` rows at once: row r's n elements at s + r *
 * s_stride, its max at mx[r * mx_stride]; each element as in one row's
 * call. The polynomial's form sets up once for all the rows, where a call
 * a row of 64 cost a third of the int8 path's softmax exponentials; the
 * exact form calls ops_exp_row a row (expf's work dwarfs the setup). */
void ops_exp_rows(float *s, int64_t n, int64_t rows, int64_t s_stride, const float *mx,
                  int64_t mx_stride);
void ops_exp_rows_fused(float *s, int64_t n, int64_t rows, int64_t s_stride, const float *mx,
                        int64_t mx_stride);

#endif
