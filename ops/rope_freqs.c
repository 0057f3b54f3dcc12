/* ops/rope_freqs.c: the angles of one RoPE variant (struct model_rope) as
 * per-pair inverse frequencies and a cos/sin scale, computed as llama.cpp's
 * ggml_rope_ext does (ggml-cpu rope_yarn, ggml_rope_yarn_corr_dims, and
 * llama_context's yarn_attn_factor), in double:
 *
 *   theta_extrap(p, i) = p * base^(-2i / n_rot) / ff[i]     (ff: rope_freqs, else 1)
 *   theta_interp(p, i) = theta_extrap(p, i) / factor        (linear and YaRN)
 *   YaRN with ext_factor e: ramp(i) = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1),
 *     lo = max(0, floor(d(beta_fast))), hi = min(n_rot - 1, ceil(d(beta_slow))),
 *     d(b) = n_rot * ln(orig_ctx / (2 pi b)) / (2 ln base);
 *     theta = theta_interp (1 - e ramp) + theta_extrap e ramp,
 *     and cos, sin scaled by 1 + 0.1 ln(factor) (transformers' get_mscale)
 *   every scaling type: cos, sin scaled by rope.scaling.attn_factor too.
 * Every term is linear in p, so the angle is p * inv_freq[i].
 * Covered by tests/cpu/test_ops_numpy.py (a numpy transcription of the
 * same definitions, transformers' _compute_yarn_parameters and llama3). */
#include "ops/ops.h"

#include "core/status.h"

#include <math.h>

/* YaRN's "correction dim": the (fractional) pair index below which pairs
 * turn more than `turns` times over orig_ctx positions. */
static double corr_dim(int64_t n_rot, int64_t orig_ctx, double turns, double base)
{
    return (double)n_rot * log((double)orig_ctx / (turns * 2 * M_PI)) / (2 * log(base));
}

void ops_rope_freqs(const struct model_rope *r, int64_t n_rot, double *inv_freq, double *mscale)
{
    IG_ASSERT(n_rot >= 0 && n_rot % 2 == 0);
    bool scaled = r->scaling == ROPE_SCALING_LINEAR || r->scaling == ROPE_SCALING_YARN;
    double freq_scale = scaled ? 1.0 / r->factor : 1.0;
    bool yarn = r->scaling == ROPE_SCALING_YARN && r->yarn_ext_factor != 0;
    double lo = 0, hi = 0;
    if (yarn) {
        lo = floor(corr_dim(n_rot, r->orig_ctx, r->yarn_beta_fast, r->base));
        hi = ceil(corr_dim(n_rot, r->orig_ctx, r->yarn_beta_slow, r->base));
        lo = lo > 0 ? lo : 0;
        hi = hi < (double)(n_rot - 1) ? hi : (double)(n_rot - 1);
    }
    for (int64_t i = 0; i < n_rot / 2; i++) {
        double extrap = pow(r->base, -2.0 * (double)i / (double)n_rot);
        if (r->freq_factors)
            extrap /= (double)r->freq_factors[i];
        double interp = freq_scale * extrap;
        double f = interp;
        if (yarn) {
            double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
            double mix = (1.0 - (y < 0 ? 0 : y > 1 ? 1 : y)) * r->yarn_ext_factor;
            f = interp * (1.0 - mix) + extrap * mix;
        }
        inv_freq[i] = f;
    }
    *mscale = r->attn_factor;
    if (yarn && r->factor > 1.0)
        *mscale *= 1.0 + 0.1 * log(r->factor);
}

void ops_rope_llama3_factors(double base, int64_t n_rot, double factor, double low, double high,
                             double orig_ctx, float *out)
{
    for (int64_t i = 0; i < n_rot / 2; i++) {
        double freq = pow(base, -2.0 * (double)i / (double)n_rot);
        double wavelen = 2 * M_PI / freq;
        if (wavelen < orig_ctx / high) {
            out[i] = 1.0f;
        } else if (wavelen > orig_ctx / low) {
            out[i] = (float)factor;
        } else {
            double smooth = (orig_ctx / wavelen - low) / (high - low);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}
