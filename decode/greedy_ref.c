/* decode/greedy_ref.c: gk_greedy_rows_ref, the CPU twin of decode/greedy.cu:
 * the sampler's own greedy rule a row. */
#include "decode/greedy.h"
#include "decode/sampler.h"

void gk_greedy_rows_ref(const float *x, int64_t ld, int64_t n_rows, int64_t n_vocab,
                        int32_t *ids)
{
    for (int64_t t = 0; t < n_rows; t++)
        ids[t] = sampler_greedy(x + t * ld, n_vocab);
}
