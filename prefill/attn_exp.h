/* prefill/attn_exp.h: the softmax's exponentials, e^(s_c - max) over a row
 * of scores, vectorized where the CPU allows and bit for bit what the C
 * library's expf gives. Covered by tests/cpu/test_attn_exp.c. */
#ifndef IGNITE_PREFILL_ATTN_EXP_H
#define IGNITE_PREFILL_ATTN_EXP_H

#include <stdint.h>

/* s[c] = expf(s[c] - mx) for 0 <= c < n. */
void attn_exp_row(float *s, int64_t n, float mx);

#endif
