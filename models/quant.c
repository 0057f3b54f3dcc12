/* models/quant.c: ggml type facts, the reference dequantization of a row
 * and the reference quantization of a Q8_0 or Q4_0 row (the KV cache's).
 *
 * Each dequantizer follows ggml's dequantize_row_* (and the gguf package's
 * gguf/quants.py, its NumPy twin) operation for operation in f32, so the
 * results agree bit for bit. Blocks are read byte-wise (scales via memcpy):
 * a GGUF with a small general.alignment may place them at odd addresses.
 * The fast matmul kernels live in ops/; this file is their reference.
 * Covered by tests/models/test_dequant.py and (quantizing)
 * tests/kvcache/test_kv_quant.py. */
#include "models/quant.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Every ggml type id GGUF files may carry; those with can_dequantize are the
 * ones ignite computes with. Ids 4 and 5 (Q4_2, Q4_3) were removed from ggml
 * and have no traits; 31-33 and 36-38 were never assigned in GGUF. */
static const struct quant_traits traits[] = {
    [0] = {"F32", 1, 4, true},
    [1] = {"F16", 1, 2, true},
    [2] = {"Q4_0", QK4_0, sizeof(struct block_q4_0), true},
    [3] = {"Q4_1", QK4_1, sizeof(struct block_q4_1), true},
    [6] = {"Q5_0", QK5_0, sizeof(struct block_q5_0), true},
    [7] = {"Q5_1", QK5_1, sizeof(struct block_q5_1), true},
    [8] = {"Q8_0", QK8_0, sizeof(struct block_q8_0), true},
    [9] = {"Q8_1", 32, 2 + 2 + 32, false}, /* ggml's block_q8_1: two halves (gguf-py says 40) */
    [10] = {"Q2_K", QK_K, sizeof(struct block_q2_K), true},
    [11] = {"Q3_K", QK_K, sizeof(struct block_q3_K), true},
    [12] = {"Q4_K", QK_K, sizeof(struct block_q4_K), true},
    [13] = {"Q5_K", QK_K, sizeof(struct block_q5_K), true},
    [14] = {"Q6_K", QK_K, sizeof(struct block_q6_K), true},
    [15] = {"Q8_K", QK_K, 4 + QK_K + QK_K / 8, false},
    [16] = {"IQ2_XXS", QK_K, 2 + QK_K / 4, false},
    [17] = {"IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32, false},
    [18] = {"IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8, false},
    [19] = {"IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16, false},
    [20] = {"IQ4_NL", QK4_NL, sizeof(struct block_iq4_nl), true},
    [21] = {"IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, false},
    [22] = {"IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16, false},
    [23] = {"IQ4_XS", QK_K, sizeof(struct block_iq4_xs), true},
    [24] = {"I8", 1, 1, false},
    [25] = {"I16", 1, 2, false},
    [26] = {"I32", 1, 4, false},
    [27] = {"I64", 1, 8, false},
    [28] = {"F64", 1, 8, false},
    [29] = {"IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, false},
    [30] = {"BF16", 1, 2, true},
    [34] = {"TQ1_0", QK_K, 2 + 4 * 13, false},
    [35] = {"TQ2_0", QK_K, 2 + 64, false},
    [39] = {"MXFP4", QK_MXFP4, sizeof(struct block_mxfp4), true},
    [40] = {"NVFP4", 64, 4 + 32, false},
    [41] = {"Q1_0", 128, 2 + 16, false},
};

#define N_TRAITS (sizeof traits / sizeof traits[0])

const struct quant_traits *quant_traits_of(uint32_t type)
{
    if (type >= N_TRAITS || !traits[type].name)
        return NULL;
    return &traits[type];
}

const char *quant_type_name(uint32_t type)
{
    static _Thread_local char buf[24];
    const struct quant_traits *t = quant_traits_of(type);
    if (t)
        return t->name;
    if (type == 4)
        return "Q4_2 (removed from ggml)";
    if (type == 5)
        return "Q4_3 (removed from ggml)";
    snprintf(buf, sizeof buf, "type %u", type);
    return buf;
}

/* llama.cpp's names of the general.file_type values (llama_model_ftype_name,
 * src/llama-model-loader.cpp, as in llama-cpp-python 0.3.36's copy), by
 * value; the ids are its enum llama_ftype, as the gguf package's
 * LlamaFileType has them. */
static const char *const file_type_names[] = {
    [0] = "all F32",
    [1] = "F16",
    [2] = "Q4_0",
    [3] = "Q4_1",
    [7] = "Q8_0",
    [8] = "Q5_0",
    [9] = "Q5_1",
    [10] = "Q2_K - Medium",
    [11] = "Q3_K - Small",
    [12] = "Q3_K - Medium",
    [13] = "Q3_K - Large",
    [14] = "Q4_K - Small",
    [15] = "Q4_K - Medium",
    [16] = "Q5_K - Small",
    [17] = "Q5_K - Medium",
    [18] = "Q6_K",
    [19] = "IQ2_XXS - 2.0625 bpw",
    [20] = "IQ2_XS - 2.3125 bpw",
    [21] = "Q2_K - Small",
    [22] = "IQ3_XS - 3.3 bpw",
    [23] = "IQ3_XXS - 3.0625 bpw",
    [24] = "IQ1_S - 1.5625 bpw",
    [25] = "IQ4_NL - 4.5 bpw",
    [26] = "IQ3_S - 3.4375 bpw",
    [27] = "IQ3_S mix - 3.66 bpw", /* IQ3_M; older llama.cpp: "IQ3_M - 3.66 bpw" */
    [28] = "IQ2_S - 2.5 bpw",
    [29] = "IQ2_M - 2.7 bpw",
    [30] = "IQ4_XS - 4.25 bpw",
    [31] = "IQ1_M - 1.75 bpw",
    [32] = "BF16",
    [36] = "TQ1_0 - 1.69 bpw ternary",
    [37] = "TQ2_0 - 2.06 bpw ternary",
    [38] = "MXFP4 MoE",
    [39] = "NVFP4",
    [40] = "Q1_0",
    [41] = "Q2_0",
};

const char *quant_file_type_name(uint64_t ftype)
{
    if (ftype < sizeof file_type_names / sizeof file_type_names[0] && file_type_names[ftype])
        return file_type_names[ftype];
    return "unknown, may not work"; /* llama.cpp's words for the rest */
}

size_t quant_row_bytes(enum quant_type type, int64_t n)
{
    const struct quant_traits *t = quant_traits_of((uint32_t)type);
    if (!t || n < 0 || n % t->block_elems)
        return 0;
    return (size_t)(n / t->block_elems) * t->block_bytes;
}

/* --- 32-element blocks ---------------------------------------------------- */

static void deq_q4_0(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q4_0, d));
    const uint8_t *qs = b + offsetof(struct block_q4_0, qs);
    for (int j = 0; j < QK4_0 / 2; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + QK4_0 / 2] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q4_1, d));
    float m = ig_f16_at(b + offsetof(struct block_q4_1, m));
    const uint8_t *qs = b + offsetof(struct block_q4_1, qs);
    for (int j = 0; j < QK4_1 / 2; j++) {
        y[j] = (float)(qs[j] & 0x0f) * d + m;
        y[j + QK4_1 / 2] = (float)(qs[j] >> 4) * d + m;
    }
}

/* The fifth bits of a Q5 block: bit j of qh belongs to element j. */
static uint32_t q5_high_bits(const uint8_t *qh)
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void deq_q5_0(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q5_0, d));
    uint32_t qh = q5_high_bits(b + offsetof(struct block_q5_0, qh));
    const uint8_t *qs = b + offsetof(struct block_q5_0, qs);
    for (int j = 0; j < QK5_0 / 2; j++) {
        int x0 = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
        int x1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = (float)(x0 - 16) * d;
        y[j + QK5_0 / 2] = (float)(x1 - 16) * d;
    }
}

static void deq_q5_1(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q5_1, d));
    float m = ig_f16_at(b + offsetof(struct block_q5_1, m));
    uint32_t qh = q5_high_bits(b + offsetof(struct block_q5_1, qh));
    const uint8_t *qs = b + offsetof(struct block_q5_1, qs);
    for (int j = 0; j < QK5_1 / 2; j++) {
        int x0 = (qs[j] & 0x0f) | (int)(((qh >> j) & 1u) << 4);
        int x1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = (float)x0 * d + m;
        y[j + QK5_1 / 2] = (float)x1 * d + m;
    }
}

static void deq_q8_0(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q8_0, d));
    const uint8_t *qs = b + offsetof(struct block_q8_0, qs);
    for (int j = 0; j < QK8_0; j++)
        y[j] = (float)(int8_t)qs[j] * d;
}

/* --- 256-element super-blocks (k-quants) ----------------------------------- */

static void deq_q2_K(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q2_K, d));
    float dmin = ig_f16_at(b + offsetof(struct block_q2_K, dmin));
    const uint8_t *sc = b + offsetof(struct block_q2_K, scales);
    const uint8_t *q = b + offsetof(struct block_q2_K, qs);
    for (int e = 0; e < QK_K; e++) {
        float dl = d * (float)(sc[e / 16] & 0x0f), ml = dmin * (float)(sc[e / 16] >> 4);
        y[e] = dl * (float)quant_k2_value(q, e) - ml;
    }
}

static void deq_q3_K(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q3_K, d));
    const uint8_t *hm = b + offsetof(struct block_q3_K, hmask);
    const uint8_t *q = b + offsetof(struct block_q3_K, qs);
    const uint8_t *sc = b + offsetof(struct block_q3_K, scales);
    for (int e = 0; e < QK_K; e++)
        y[e] = d * (float)quant_k3_scale(sc, e / 16) * (float)quant_k3_value(q, hm, e);
}

static void deq_q4_K(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q4_K, d));
    float dmin = ig_f16_at(b + offsetof(struct block_q4_K, dmin));
    const uint8_t *s = b + offsetof(struct block_q4_K, scales);
    const uint8_t *q = b + offsetof(struct block_q4_K, qs);
    for (int j = 0; j < 8; j += 2, q += 32) {
        int sc, mn;
        quant_k4_scale_min(s, j, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        quant_k4_scale_min(s, j + 1, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)(q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
}

static void deq_q5_K(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q5_K, d));
    float dmin = ig_f16_at(b + offsetof(struct block_q5_K, dmin));
    const uint8_t *s = b + offsetof(struct block_q5_K, scales);
    const uint8_t *qh = b + offsetof(struct block_q5_K, qh);
    const uint8_t *ql = b + offsetof(struct block_q5_K, qs);
    unsigned u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
        int sc, mn;
        quant_k4_scale_min(s, j, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        quant_k4_scale_min(s, j + 1, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
}

static void deq_q6_K(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b + offsetof(struct block_q6_K, d));
    const uint8_t *ql = b + offsetof(struct block_q6_K, ql);
    const uint8_t *qh = b + offsetof(struct block_q6_K, qh);
    const int8_t *sc = (const int8_t *)(b + offsetof(struct block_q6_K, scales));
    for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            y[l] = d * (float)sc[is + 0] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

/* --- the IQ4 formats: 16 non-uniform levels ------------------------------- */

/* 32 quants of qs (nibbles as quant_iq4_value says) times dl. */
static void deq_iq4_32(const uint8_t *qs, float dl, float *y)
{
    for (int j = 0; j < 16; j++) {
        y[j] = dl * (float)quant_iq4_value(qs[j] & 0x0f);
        y[j + 16] = dl * (float)quant_iq4_value(qs[j] >> 4);
    }
}

static void deq_iq4_nl(const uint8_t *b, float *y)
{
    deq_iq4_32(b + offsetof(struct block_iq4_nl, qs), ig_f16_at(b), y);
}

static void deq_mxfp4(const uint8_t *b, float *y)
{
    float d = quant_e8m0_half(b[0]);
    const uint8_t *qs = b + offsetof(struct block_mxfp4, qs);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)quant_mxfp4_value(qs[j] & 0x0f);
        y[j + 16] = d * (float)quant_mxfp4_value(qs[j] >> 4);
    }
}

static void deq_iq4_xs(const uint8_t *b, float *y)
{
    float d = ig_f16_at(b);
    const uint8_t *qs = b + offsetof(struct block_iq4_xs, qs);
    for (int j = 0; j < QK_K / 32; j++)
        deq_iq4_32(qs + 16 * j, d * (float)quant_iq4_xs_scale(b, j), y + 32 * j);
}

/* --- rows ------------------------------------------------------------------ */

typedef void (*block_fn)(const uint8_t *block, float *y);

static block_fn block_fn_of(enum quant_type type)
{
    switch (type) {
    case QUANT_Q4_0: return deq_q4_0;
    case QUANT_Q4_1: return deq_q4_1;
    case QUANT_Q5_0: return deq_q5_0;
    case QUANT_Q5_1: return deq_q5_1;
    case QUANT_Q8_0: return deq_q8_0;
    case QUANT_Q2_K: return deq_q2_K;
    case QUANT_Q3_K: return deq_q3_K;
    case QUANT_Q4_K: return deq_q4_K;
    case QUANT_Q5_K: return deq_q5_K;
    case QUANT_Q6_K: return deq_q6_K;
    case QUANT_IQ4_NL: return deq_iq4_nl;
    case QUANT_IQ4_XS: return deq_iq4_xs;
    case QUANT_MXFP4: return deq_mxfp4;
    default: return NULL;
    }
}

void quant_dequantize_row(enum quant_type type, const void *src, float *dst, int64_t n)
{
    const struct quant_traits *t = quant_traits_of((uint32_t)type);
    IG_ASSERT(t && t->can_dequantize && n >= 0 && n % t->block_elems == 0);
    const uint8_t *s = src;
    switch (type) {
    case QUANT_F32:
        memcpy(dst, s, (size_t)n * 4);
        return;
    case QUANT_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = ig_f16_at(s + 2 * i);
        return;
    case QUANT_BF16:
        for (int64_t i = 0; i < n; i++) {
            ig_bf16 h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = ig_bf16_to_f32(h);
        }
        return;
    default: {
        block_fn fn = block_fn_of(type);
        IG_ASSERT(fn);
        for (int64_t i = 0; i < n / t->block_elems; i++)
            fn(s + (size_t)i * t->block_bytes, dst + i * t->block_elems);
    }
    }
}

/* --- quantizing (ggml's reference quantizers) ------------------------------ */

static void quant_block_q8_0(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    ig_f16 h = ig_f32_to_f16(d);
    memcpy(b, &h, sizeof h);
    int8_t *qs = (int8_t *)(b + offsetof(struct block_q8_0, qs));
    for (int j = 0; j < QK8_0; j++) {
        float v = roundf(x[j] * id);
        qs[j] = (int8_t)(v == v ? v : 0.0f); /* a NaN (ggml's cast is undefined) as 0 */
    }
}

static void quant_block_q4_0(const float *x, uint8_t *b)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK4_0; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
    ig_f16 h = ig_f32_to_f16(d);
    memcpy(b, &h, sizeof h);
    uint8_t *qs = b + offsetof(struct block_q4_0, qs);
    for (int j = 0; j < QK4_0 / 2; j++) {
        float fa = x[j] * id + 8.5f, fc = x[j + QK4_0 / 2] * id + 8.5f;
        /* in [0.5, 16.5] for finite rows; a NaN (ggml's cast is undefined) as 8, a 0 */
        int a = fa == fa ? (int)(int8_t)fa : 8, c = fc == fc ? (int)(int8_t)fc : 8;
        qs[j] = (uint8_t)((a < 15 ? a : 15) | (c < 15 ? c : 15) << 4);
    }
}

void quant_quantize_row(enum quant_type type, const float *src, void *dst, int64_t n)
{
    IG_ASSERT((type == QUANT_Q8_0 || type == QUANT_Q4_0) && n % 32 == 0);
    uint8_t *b = dst;
    size_t bytes = type == QUANT_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    for (int64_t i = 0; i < n; i += 32, b += bytes)
        if (type == QUANT_Q8_0)
            quant_block_q8_0(src + i, b);
        else
            quant_block_q4_0(src + i, b);
}
