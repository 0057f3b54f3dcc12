/* models/hf_mxfp4.c: gpt-oss's fused MXFP4 experts, repacked from a
 * Hugging Face folder's layout into ggml's blocks (models/hf.h says both),
 * as llama.cpp's converter does (conversion/gpt_oss.py: repack_mxfp4,
 * transform_nibble_layout; gate and up split from gate_up's even and odd
 * rows). Values are moved, never dequantized. Binding the tensors is
 * hf_model.c's. Covered by tests/cpu/test_gptoss_hf.py (a folder written
 * from a GGUF gives its logits bit for bit). */
#include "models/hf.h"


enum { MXFP4_VALUES = 32, MXFP4_HF_BYTES = 16, MXFP4_GGML_BYTES = 17 };

/* One block: HF's element 2j is byte j's low nibble, 2j + 1 its high one;
 * ggml's byte j holds element j low and element j + 16 high. */
static void repack_block(uint8_t scale, const uint8_t *hf, uint8_t *out)
{
    uint8_t v[MXFP4_VALUES];
    for (int j = 0; j < MXFP4_HF_BYTES; j++) {
        v[2 * j] = hf[j] & 0x0F;
        v[2 * j + 1] = hf[j] >> 4;
    }
    out[0] = scale;
    for (int j = 0; j < MXFP4_VALUES / 2; j++)
        out[1 + j] = (uint8_t)(v[j] | v[j + MXFP4_VALUES / 2] << 4);
}

void hf_mxfp4_repack(const uint8_t *blocks, const uint8_t *scales, int64_t n_expert,
                     int64_t n_src_rows, int64_t rows, int64_t first, int64_t step, int64_t cols,
                     uint8_t *out)
{
    int64_t nb = cols / MXFP4_VALUES;
    for (int64_t e = 0; e < n_expert; e++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t src = e * n_src_rows + first + r * step;
            const uint8_t *b = blocks + src * nb * MXFP4_HF_BYTES;
            const uint8_t *s = scales + src * nb;
            uint8_t *o = out + (e * rows + r) * nb * MXFP4_GGML_BYTES;
            for (int64_t k = 0; k < nb; k++)
                repack_block(s[k], b + k * MXFP4_HF_BYTES, o + k * MXFP4_GGML_BYTES);
        }
}
