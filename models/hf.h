/* models/hf.h: Hugging Face model folders (config.json + *.safetensors
 * [+ model.safetensors.index.json] + tokenizer files), models/-internal.
 *
 * model_load hands a directory to hf_load (hf_model.c), which reads
 * config.json through hf_parse_config (hf_config.c: the architecture table,
 * hyper-parameters, refusals), maps the safetensors files (safetensors.c)
 * and points struct model's weights into them. The tokenizer files are
 * tokenizer/hf_vocab.c's. Covered by tests/models/test_hf_folder.py and
 * test_hf_malformed.py.
 *
 * Adding an architecture is an entry in hf_config.c's table: its
 * config.json name, the GGUF architecture it runs as, where its text
 * model's config and tensors live; the tensors' names are the table of
 * tensors' (models/tensors.h), the same for every architecture but where
 * a feature tells them apart. */
#ifndef IGNITE_MODELS_HF_H
#define IGNITE_MODELS_HF_H

#include "models/model.h"
#include "models/safetensors.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A value of the config class's __init__ for a key config.json may leave
 * out (Gemma3TextConfig's inside a multimodal config.json's text_config). */
struct hf_default {
    const char *key;
    double value;
};

struct hf_arch {
    const char *name;        /* config.json "architectures"[0], e.g. "LlamaForCausalLM" */
    const char *arch;        /* the GGUF architecture it runs as ("llama") */
    enum model_arch id;      /* its row of models/arch.c: Q/K norms, post-norms, window... */
    const char *text_config; /* member of config.json holding the text model's settings, or NULL */
    /* Where the table of tensors' Hugging Face names (models/tensors.h)
     * sit: the text model's prefix ("model.": "model.embed_tokens.weight",
     * "model.layers.N.self_attn.q_proj.weight"), and the one of the names
     * beside the text model ("": "lm_head.weight"). */
    const char *prefix, *beside;
    /* Another layout of the same class (transformers >= 4.52 saves
     * Gemma3ForConditionalGeneration's text model under model.language_model.
     * and its output as lm_head.weight): taken when prefix's embed_tokens is
     * absent. NULL: none. */
    const char *prefix_alt, *beside_alt;
    const char *act;         /* the one hidden_act the forward computes ("silu") */
    bool norm_plus_one;      /* RMSNorm multiplies by (1 + w), as HF Gemma does */
    bool tie_default;        /* tie_word_embeddings when config.json is silent */
    double eps_default;      /* rms_norm_eps when config.json is silent */
    const struct hf_default *defaults; /* more defaults, ending with a NULL key; or NULL */
};

/* gpt-oss (id MODEL_ARCH_GPT_OSS): the experts are fused MXFP4 tensors
 * (quantization_config "mxfp4"), repacked at load into ggml's blocks
 * (hf_mxfp4.c); config.json's num_local_experts, intermediate_size. */
#define HF_MXFP4_EXPERTS(a) ((a)->id == MODEL_ARCH_GPT_OSS)

/* Layers a config.json may describe (num_hidden_layers' upper bound). */
#define HF_MAX_LAYERS 4096

/* What config.json says. */
struct hf_config {
    const struct hf_arch *arch;
    struct model_hparams hp; /* tied_embeddings from tie_word_embeddings */
    /* Bit il set: layer il is local (sliding window hp.n_swa, RoPE
     * hp.rope[MODEL_ROPE_LOCAL]); from layer_types or sliding_window_pattern. */
    uint8_t local[HF_MAX_LAYERS / 8];
    /* Bit il set: layer il is gated DeltaNet (Qwen3.5: layer_types'
     * "linear_attention", else all but every full_attention_interval-th). */
    uint8_t recurrent[HF_MAX_LAYERS / 8];
    /* rope_scaling "llama3" (factor 0: none), made into rope_freqs divisors
     * by hf_load (ops_rope_llama3_factors). */
    struct {
        double factor, low, high, orig_ctx;
    } llama3;
    /* Gemma 4 (Gemma4TextConfig): what its layers do not share. hp.head_dim
     * is the full_attention layers' (global_head_dim), hp.head_dim_local the
     * sliding ones' (head_dim); hp.n_kv_shared the last layers that read
     * the K/V of the last earlier layer of their kind. */
    struct {
        int64_t n_kv_global; /* full_attention layers' KV heads (num_global_key_value_heads
                                with attention_k_eq_v, else num_key_value_heads) */
        int64_t n_ff_shared; /* the shared-KV layers' FFN width (2 x intermediate_size
                                with use_double_wide_mlp) */
        int64_t rot_pairs;   /* proportional RoPE: the full_attention layers' rotated
                                pairs of head_dim / 2 (the rest rotate by 0) */
        bool k_eq_v;         /* attention_k_eq_v: full_attention layers' V is K */
    } gemma4;
};

/* Reads a parsed config.json (`name` names it in messages). Returns IG_OK,
 * or IG_E_MODEL after one line: quantization_config present, an unknown
 * architecture, a missing or out-of-range hyper-parameter, a rope_scaling
 * kind or activation the forward does not compute. No I/O: fuzzed by
 * tests/fuzz/fuzz_hf_json.c. */
int hf_parse_config(const char *name, const cJSON *root, struct hf_config *out);

/* The architectures hf_parse_config accepts, comma-separated (messages). */
const char *hf_arch_names(void);

/* Sampling defaults from a parsed generation_config.json (absent members
 * leave their has_ flag clear; do_sample false means greedy). Returns IG_OK
 * or IG_E_MODEL for a member of the wrong type or range. */
int hf_parse_generation(const char *name, const cJSON *root, struct model_sampling *out);

/* The chat template of a parsed tokenizer_config.json: its "chat_template"
 * string, or the "default" entry of a list of {name, template}. NULL when
 * it has none. Points into `root`. */
const char *hf_chat_template(const cJSON *root);

/* The folder's state behind struct model (owned by it). */
struct hf_folder {
    struct st_file **shards;    /* n_shards mapped files */
    char **shard_names;         /* their file names in the folder */
    int n_shards;
    const struct st_tensor **by_name; /* every tensor of every shard, sorted by name */
    int64_t n_tensors;
    float *vectors;             /* norms and biases widened to f32 */
    size_t n_vectors, cap_vectors;
    const void **experts;       /* each expert tensor's data (struct model_weight's
                                   expert_data point into it) */
    size_t n_experts, cap_experts;
    char *chat_template;        /* NUL-terminated, or NULL */
    float *rope_freqs;          /* Llama 3's or Gemma 4's (proportional) RoPE divisors, or NULL */
    void **repacked;            /* gpt-oss's experts in ggml's MXFP4 blocks, a buffer
                                   per weight (hf_mxfp4.c), n_repacked of them */
    int64_t n_repacked;
};

/* gpt-oss's fused MXFP4 experts (models/hf_mxfp4.c), as llama.cpp's
 * converter (conversion/gpt_oss.py) repacks them. `blocks` is
 * [n_expert, n_src_rows, cols / 32, 16] (two E2M1 values a byte, element
 * 2j in byte j's low nibble), `scales` [n_expert, n_src_rows, cols / 32]
 * (E8M0, as ggml's); rows first, first + step, ... of each expert (gate:
 * 0, 2; up: 1, 2; down: 0, 1) become `rows` rows of ggml's 17-byte blocks
 * (the scale, then byte j holding elements j and j + 16) in `out`, sized
 * n_expert * rows * cols / 32 * 17 bytes. */
void hf_mxfp4_repack(const uint8_t *blocks, const uint8_t *scales, int64_t n_expert,
                     int64_t n_src_rows, int64_t rows, int64_t first, int64_t step, int64_t cols,
                     uint8_t *out);

/* Loads the folder `dir` into m (path already set). Returns IG_OK, or
 * IG_E_MODEL / IG_E_IO / IG_E_NOMEM after one line naming the file. */
int hf_load(const char *dir, struct model *m);

void hf_folder_free(struct hf_folder *h);

#endif
