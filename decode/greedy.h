/* decode/greedy.h: the greedy token of each row of logits on the GPU, so a
 * batch of sequences that decode greedily downloads a token a row instead
 * of the row (1 KB a step for 256 rows of Llama 3's 128256 logits, not
 * 131 MB). The rule is decode/sampler.h's sampler_greedy: the first index
 * of the largest value, NaN ranking last, +inf counting as the largest
 * float, 0 when nothing is above -inf. Covered by
 * tests/emu/test_gpu_ops_emu.c (the emulated kernel against the twin) and
 * tests/gpu/test_gpu_ops_gpu.c. */
#ifndef IGNITE_DECODE_GREEDY_H
#define IGNITE_DECODE_GREEDY_H

#include "devkit/dev_entry.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ids[t] = the greedy token of row t of x (f32, rows of n_vocab at stride
 * ld) for t < n_rows; device pointers, queued on `stream`. IG_OK, or
 * IG_E_INTERNAL (reported) for bad sizes. */
int IG_DEV(gk_greedy_rows)(const float *x, int64_t ld, int64_t n_rows, int64_t n_vocab,
                           int32_t *ids, void *stream);
/* The twin: sampler_greedy a row, host pointers. */
void gk_greedy_rows_ref(const float *x, int64_t ld, int64_t n_rows, int64_t n_vocab,
                        int32_t *ids);

#ifdef __cplusplus
}
#endif

#endif
