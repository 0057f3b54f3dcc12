/* tokenizer/tokenizer.h: text <-> token ids with the model's own vocabulary.
 *
 * Two algorithms, chosen by tokenizer.ggml.model:
 *   "gpt2"  byte-level BPE: a pre-tokenizer splits the text (tokenizer.ggml.pre:
 *           gpt2, smollm, llama3/llama-bpe, qwen2, qwen35, tekken, deepseek-llm,
 *           deepseek-coder, falcon), each piece's bytes are
 *           mapped to GPT-2's printable code points and merged by merge rank.
 *   "llama" SentencePiece-style BPE: spaces become U+2581, adjacent symbols
 *           are merged by token score, leftovers fall back to <0xXX> bytes.
 *   "gemma4" BPE by merge rank over UTF-8 characters with spaces as U+2581
 *           (Gemma 4's tokenizer.json), the text cut only where newline runs
 *           start and end, leftovers to <0xXX> bytes.
 * Control and user-defined tokens are found in the text as single tokens
 * (longest match first); control tokens only when the caller asks for it
 * (user-defined ones are ordinary vocabulary, matched always, as
 * sentencepiece and llama.cpp do).
 *
 * The core is built from plain arrays (struct tok_vocab_desc) and knows
 * nothing of files; tok_load_gguf fills those arrays from a GGUF's
 * tokenizer.ggml.* metadata, tok_load_hf from a Hugging Face folder's
 * tokenizer.json (hf_vocab.c), and tok_load_model picks whichever the
 * loaded model came from. A SentencePiece-style vocabulary given merges
 * (tokenizer.json's BPE with byte fallback) merges by merge rank, as HF
 * does, instead of by token score. A struct tok_vocab is not thread-safe: encode
 * keeps a cache of pre-tokens in it, so use one per thread.
 *
 * Invalid UTF-8 in the input never fails: each byte that does not start a
 * valid sequence is a character of its own, of class "other" (neither
 * letter, number nor space). Byte-level BPE then encodes its byte like any
 * other; SentencePiece-style BPE gives it its <0xXX> token (or unk).
 * Decoding reproduces the input bytes exactly for byte-level BPE.
 *
 * Covered by tests/tokenizer/ (HF tokenizers and sentencepiece as references).
 */
#ifndef IGNITE_TOKENIZER_TOKENIZER_H
#define IGNITE_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf_file;
struct model;
struct cJSON;

enum tok_model {
    TOK_MODEL_BPE, /* "gpt2": byte-level BPE with merges */
    TOK_MODEL_SPM, /* "llama": SentencePiece-style BPE with scores */
    TOK_MODEL_BPE_UTF8, /* "gemma4": BPE merges over UTF-8 characters, spaces as U+2581,
                           <0xXX> byte fallback, text split only at newline runs */
};

/* Pre-tokenizers for byte-level BPE (the regexes they reproduce are in
 * tokenizer/pretok.c). */
enum tok_pre {
    TOK_PRE_GPT2,   /* GPT-2's regex */
    TOK_PRE_SMOLLM, /* every number character alone, then GPT-2's regex */
    TOK_PRE_LLAMA3, /* Llama 3's regex (numbers in runs of at most 3) */
    TOK_PRE_QWEN2,  /* Llama 3's regex with single-digit numbers */
    TOK_PRE_QWEN35, /* Qwen2's with combining marks inside words (Qwen3.5) */
    TOK_PRE_TEKKEN, /* Mistral Nemo/Small: capitalized and lower-case runs apart */
    TOK_PRE_DEEPSEEK_LLM,   /* six regexes in sequence (tokenizer/pretok.c) */
    TOK_PRE_DEEPSEEK_CODER, /* five */
    TOK_PRE_FALCON, /* punctuation runs, GPT-2's regex, digits in threes */
    TOK_PRE_GPT4O,  /* o200k (gpt-oss, Llama 4): tekken's with contractions, digits
                       in threes */
};

/* Token types as GGUF numbers them (tokenizer.ggml.token_type). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* End-of-generation ids beyond EOS/EOT/EOM (generation_config.json lists). */
#define TOK_MAX_EOG 8

/* A byte string that need not be NUL-terminated. */
struct tok_str {
    const char *ptr;
    size_t len;
};

/* Everything a vocabulary is made of, as plain arrays. Borrowed: the built
 * struct tok_vocab copies what it keeps. */
struct tok_vocab_desc {
    const char *model;             /* "gpt2" or "llama" */
    const char *pre;               /* pre-tokenizer name; NULL = "gpt2" (gpt2 model only) */
    int64_t n_tokens;
    const struct tok_str *tokens;  /* n_tokens strings; GPT-2 form for byte-level BPE */
    const float *scores;           /* n_tokens, or NULL (all 0); used by "llama" */
    const int32_t *types;          /* n_tokens enum tok_type, or NULL (all normal) */
    int64_t n_merges;
    const struct tok_str *merges;  /* "left right", highest priority first */
    const struct tok_str *merges_right; /* NULL, or the right halves: merges[] then holds
                                           the left ones (tokenizer.json's pair form) */
    int32_t bos_id, eos_id, eot_id, eom_id, unk_id, pad_id; /* -1 when absent */
    int32_t eog_ids[TOK_MAX_EOG];  /* more ids that end generation */
    int n_eog;
    int add_bos, add_eos;          /* 1, 0, or -1 for the model's default */
    int add_space_prefix;          /* 1, 0, or -1 for the default ("llama": 1) */
    int space_prefix_hf;           /* "llama" with the prefix, where HF's rules apply instead
                                      of sentencepiece's: 0 no (GGUF); 1 only the piece of
                                      text that starts the input, unless it starts with a
                                      space (Metaspace "first"); 2 every piece between special
                                      tokens (the Prepend normalizer); 3 every piece that does
                                      not start with a space (Metaspace "always"). An empty
                                      piece gets none */
    int ignore_merges;             /* 1, 0, or -1 for the default (llama3 pre-tokenizer) */
};

/* Sets every id to -1 and every flag to -1 (defaults); zeroes the rest. */
void tok_vocab_desc_init(struct tok_vocab_desc *d);

struct tok_vocab;

/* Builds a vocabulary. Returns IG_OK and *out (free with tok_vocab_free),
 * or IG_E_MODEL after one line naming the problem (unknown model or
 * pre-tokenizer type, an id out of range, duplicate tokens...), or
 * IG_E_NOMEM. Merges naming unknown tokens are skipped, as HF does. */
int tok_vocab_build(const struct tok_vocab_desc *d, struct tok_vocab **out);

/* Reads tokenizer.ggml.* from a parsed GGUF and builds the vocabulary.
 * Same returns as tok_vocab_build; a missing tokens array or model key is
 * IG_E_MODEL. */
int tok_load_gguf(const struct gguf_file *g, struct tok_vocab **out);

/* Reads a Hugging Face folder's tokenizer.json (BPE: byte-level, or
 * SentencePiece-style with byte fallback), tokenizer_config.json (BOS/EOS
 * names) and generation_config.json (more EOS ids); the last two are
 * optional. Same returns as tok_vocab_build, plus IG_E_IO for an unreadable
 * file; IG_E_MODEL (naming the file) for a missing tokenizer.json, bad JSON,
 * a model type other than BPE, or a normalizer or pre-tokenizer that none of
 * the known pipelines matches. */
int tok_load_hf(const char *dir, struct tok_vocab **out);

/* tok_load_hf on parsed JSON (`name` names tokenizer.json in messages;
 * cfg and gen may be NULL). No I/O: fuzzed by tests/fuzz/fuzz_hf_json.c. */
int tok_hf_build(const char *name, const struct cJSON *tok, const struct cJSON *cfg,
                 const struct cJSON *gen, struct tok_vocab **out);

/* The vocabulary of a loaded model, GGUF or folder. */
int tok_load_model(const struct model *m, struct tok_vocab **out);

/* The vocabulary at `path` without loading weights: a folder's tokenizer
 * files, or a GGUF's metadata. */
int tok_load_path(const char *path, struct tok_vocab **out);

void tok_vocab_free(struct tok_vocab *v);

/* Facts about a built vocabulary. */
int64_t tok_n_tokens(const struct tok_vocab *v);
enum tok_model tok_model_of(const struct tok_vocab *v);
enum tok_pre tok_pre_of(const struct tok_vocab *v);
/* "gpt2", "llama" or "gemma4", as tokenizer.ggml.model names them. */
const char *tok_model_name(enum tok_model m);
/* "gpt2", "smollm", "llama3", "qwen2", "qwen35", "tekken", ...: the
 * family's tokenizer.ggml.pre name. */
const char *tok_pre_name(enum tok_pre p);
int32_t tok_bos(const struct tok_vocab *v); /* -1 when absent */
/* True when TOK_ENC_ADD_BOS prepends BOS (the vocabulary's add_bos setting). */
bool tok_adds_bos(const struct tok_vocab *v);
int32_t tok_eos(const struct tok_vocab *v);
int32_t tok_eot(const struct tok_vocab *v);
/* True for EOS, EOT, EOM, the extra EOG ids, and the control tokens that
 * end a turn in the chat formats (<end_of_turn>, <|eot_id|>, <|im_end|>, ...
 * found by their text, as llama.cpp does): generation stops there. */
bool tok_is_eog(const struct tok_vocab *v, int32_t id);
enum tok_type tok_type_of(const struct tok_vocab *v, int32_t id);
/* The token's string as stored in the vocabulary (GPT-2 form, U+2581...). */
struct tok_str tok_token_text(const struct tok_vocab *v, int32_t id);

/* Growable list of ids the encoder appends to. Zero-initialise; free with
 * tok_ids_free. */
struct tok_ids {
    int32_t *ids;
    int64_t n, cap;
};
void tok_ids_free(struct tok_ids *ids);

/* Encoding flags. */
#define TOK_ENC_ADD_BOS 1u       /* prepend BOS when the vocabulary's metadata says so */
#define TOK_ENC_ADD_EOS 2u       /* append EOS when the metadata says so */
#define TOK_ENC_PARSE_SPECIAL 4u /* find control-token text in the input (user-defined: always) */
#define TOK_ENC_DEFAULT (TOK_ENC_ADD_BOS | TOK_ENC_ADD_EOS | TOK_ENC_PARSE_SPECIAL)

/* Encodes `len` bytes of `text` (any bytes; see the top of this file for
 * invalid UTF-8) and appends the ids to *out. Returns IG_OK, IG_E_NOMEM, or
 * IG_E_INPUT for a text of 2 GiB or more (one line printed on error). */
int tok_encode(struct tok_vocab *v, const char *text, size_t len, unsigned flags,
               struct tok_ids *out);

/* Pre-token boundaries for a byte-level BPE pre-tokenizer, exposed for the
 * splitter tests: appends the end offset of every piece of text[0..len) to
 * *ends (the first piece starts at 0). Returns IG_OK or IG_E_NOMEM. */
int tok_pre_split(enum tok_pre pre, const char *text, size_t len, struct tok_ids *ends);

/* Maps a tokenizer.ggml.pre name to a splitter. Returns IG_OK, or
 * IG_E_MODEL after one line naming the unknown type. */
int tok_pre_from_name(const char *name, enum tok_pre *out);

/* The bytes token `id` stands for, written to buf (at most cap bytes; the
 * full length is returned, so a larger return means truncation; -1 for an
 * id out of range). Byte-level tokens are mapped back to raw bytes, U+2581
 * becomes a space and <0xXX> its byte. Control tokens give their text when
 * `special` is true and nothing otherwise; so do unknown and unused ones.
 * May be a fragment of a UTF-8 character. */
int64_t tok_piece(const struct tok_vocab *v, int32_t id, bool special, char *buf, size_t cap);

/* Decodes a whole sequence into a malloc'd buffer (*out, *out_len; NUL
 * appended but not counted). For "llama" vocabularies with the space prefix
 * the one space that encoding added at the start is removed. Returns IG_OK,
 * IG_E_INPUT for an id out of range (one line), or IG_E_NOMEM. */
int tok_decode(const struct tok_vocab *v, const int32_t *ids, int64_t n, bool special,
               char **out, size_t *out_len);

/* Streaming decoder: text for one token at a time that never ends inside a
 * UTF-8 character. A trailing prefix of a valid multi-byte sequence is held
 * back until the tokens that complete it arrive; bytes that can never
 * become valid UTF-8 are passed through unchanged, so the concatenation of
 * everything emitted equals tok_decode's output byte for byte. */
struct tok_stream {
    const struct tok_vocab *v;
    bool special;          /* render control tokens */
    bool at_start;         /* nothing emitted yet (for the space prefix) */
    unsigned char held[4]; /* incomplete sequence carried to the next token */
    int n_held;
    char *buf;             /* output of the last call, owned */
    size_t cap;
};

void tok_stream_init(struct tok_stream *s, const struct tok_vocab *v, bool special);
/* True when token id, as the first token a stream (or tok_decode) prints,
 * loses the leading space of its piece (SentencePiece's space prefix). */
bool tok_first_piece_drops_space(const struct tok_vocab *v, int32_t id);
/* Adds one token; *text and *len receive the bytes that are now complete (valid
 * until the next call). Returns IG_OK, IG_E_INPUT (bad id) or IG_E_NOMEM. */
int tok_stream_push(struct tok_stream *s, int32_t id, const char **text, size_t *len);
/* Emits whatever is held (an incomplete sequence at the very end). */
int tok_stream_flush(struct tok_stream *s, const char **text, size_t *len);
void tok_stream_free(struct tok_stream *s);

#endif
