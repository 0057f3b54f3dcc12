/* models/synthetic.h: random weights in memory for the shapes of well-known
 * models, so speed can be measured without downloading anything (`ignite
 * bench -m synthetic:NAME[:TYPE]`). The values are random but finite and of
 * a sane scale; the text such a model writes means nothing.
 * Covered by tests/cli/test_bench.py. */
#ifndef IGNITE_MODELS_SYNTHETIC_H
#define IGNITE_MODELS_SYNTHETIC_H

#include "models/model.h"

#include <stddef.h>

/* Builds model `name` (see model_synthetic_names) with every matrix stored
 * as `type` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K;
 * the K types need widths that are multiples of 256) and f32 norms. Free
 * with model_free.
 * Returns IG_OK, IG_E_USAGE (unknown name or type) or IG_E_NOMEM. */
int model_synthetic(const char *name, enum quant_type type, struct model **out);

/* Parses "synthetic:NAME[:TYPE]" (TYPE defaults to Q4_1, case-insensitive;
 * Q4_K_M: Q4_K with V, the FFN's down projection and an untied output head
 * in Q6_K, as llama.cpp's Q4_K_M mostly is) and builds it. Returns as model_synthetic, or IG_E_USAGE for a spec that
 * does not start with "synthetic:". */
int model_synthetic_spec(const char *spec, struct model **out);

/* The same shapes without any weight bytes: every data pointer is NULL and
 * m->virtual_weights is set. Only a device backend that makes its own random
 * weights (backend/gpu.h) runs such a model; it costs no host memory. */
int model_synthetic_spec_shapes(const char *spec, struct model **out);

/* The known names, comma-separated, for help text. */
const char *model_synthetic_names(void);

/* Bytes of all weights of m (what a model "size" column shows). */
size_t model_weight_bytes(const struct model *m);

#endif
