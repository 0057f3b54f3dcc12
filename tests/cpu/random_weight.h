/* tests/cpu/random_weight.h: random weights in a stored format, for the
 * matmul tests (test_matmul.c, test_qmatmul.c). Random bytes are valid
 * quants except for the f16 scales, which get sane finite values. */
#ifndef IGNITE_TESTS_CPU_RANDOM_WEIGHT_H
#define IGNITE_TESTS_CPU_RANDOM_WEIGHT_H

#include "core/half.h"
#include "models/model.h"
#include "models/quant.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

/* A type under test and the byte offsets of the f16 scales inside its block
 * (MXFP4: none, its E8M0 scale is byte 0; n_scales 0 draws it where the
 * packed layout holds it exactly, 104..143, n_scales 1 from 60..200, most
 * of which it does not: ops/qmatmul.h QMM_MXFP4_E_MIN). */
struct type_case {
    enum quant_type type;
    int64_t cols;
    int n_scales;
    int scale_off[2];
};

/* A weight of `rows` rows of tc->cols random values (the caller frees
 * w.data), drawn from the stream *rng. */
static inline struct model_weight random_weight(const struct type_case *tc, int64_t rows,
                                                uint64_t *rng)
{
    const struct quant_traits *tr = quant_traits_of(tc->type);
    struct model_weight w = {tc->type, rows, tc->cols, quant_row_bytes(tc->type, tc->cols), NULL,
                             1, NULL};
    size_t bytes = w.row_bytes * (size_t)rows;
    uint8_t *p = malloc(bytes);
    IG_ASSERT(p);
    if (tc->type == QUANT_F32 || tc->type == QUANT_F16 || tc->type == QUANT_BF16) {
        for (int64_t i = 0; i < rows * tc->cols; i++) {
            float v = test_rand_f(rng);
            if (tc->type == QUANT_F32)
                ((float *)p)[i] = v;
            else if (tc->type == QUANT_F16)
                ((ig_f16 *)p)[i] = ig_f32_to_f16(v);
            else
                ((ig_bf16 *)p)[i] = ig_f32_to_bf16(v);
        }
    } else {
        for (size_t i = 0; i < bytes; i++)
            p[i] = (uint8_t)(test_rand_u64(rng) >> 24);
        for (size_t b = 0; tc->type == QUANT_MXFP4 && b < bytes / tr->block_bytes; b++)
            p[b * tr->block_bytes] = (uint8_t)(tc->n_scales ? 60 + test_rand_u64(rng) % 141
                                                            : 104 + test_rand_u64(rng) % 40);
        for (size_t b = 0; tc->type != QUANT_MXFP4 && b < bytes / tr->block_bytes; b++)
            for (int s = 0; s < tc->n_scales; s++) {
                ig_f16 h = ig_f32_to_f16(0.01f + 0.05f * (test_rand_f(rng) + 1.0f));
                memcpy(p + b * tr->block_bytes + tc->scale_off[s], &h, sizeof h);
            }
    }
    w.data = p;
    return w;
}

#endif
