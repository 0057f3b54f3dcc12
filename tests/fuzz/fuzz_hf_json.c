/* tests/fuzz/fuzz_hf_json.c: libFuzzer entry for the readers of a Hugging
 * Face folder's JSON files: config.json (hf_parse_config),
 * generation_config.json (hf_parse_generation), tokenizer_config.json
 * (hf_chat_template) and tokenizer.json (tok_hf_build).
 *
 * The input is parsed as JSON once and handed to every reader (each reads
 * the members it knows and must refuse the rest cleanly); a vocabulary that
 * builds then encodes and decodes a short text. Messages are formatted but
 * not printed (ig_status_quiet). Built by scripts/fuzz.sh; fuzz_replay.c
 * runs it over tests/fuzz/corpus_json/ in ordinary builds. */
#include "core/json.h"
#include "core/status.h"
#include "models/hf.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ig_status_quiet(1);
    cJSON *j;
    if (ig_json_parse("fuzz.json", (const char *)data, size, 1, &j) != IG_OK)
        return 0;
    struct hf_config c;
    if (hf_parse_config("config.json", j, &c) == IG_OK)
        sink += (uint64_t)(c.hp.n_layer + c.hp.head_dim + c.hp.n_swa_layers) + c.hp.tied_embeddings;
    struct model_sampling s;
    if (hf_parse_generation("generation_config.json", j, &s) == IG_OK)
        sink += s.has_top_k;
    const char *t = hf_chat_template(j);
    sink += t ? strlen(t) : 0;
    struct tok_vocab *v;
    if (tok_hf_build("tokenizer.json", j, j, j, &v) == IG_OK) {
        static const char text[] = "Hello wörld 123 <|im_start|>\xff ";
        struct tok_ids ids = {0};
        if (tok_encode(v, text, sizeof text - 1, TOK_ENC_DEFAULT, &ids) == IG_OK) {
            char *out = NULL;
            size_t len = 0;
            if (tok_decode(v, ids.ids, ids.n, true, &out, &len) == IG_OK)
                sink += len;
            free(out);
        }
        tok_ids_free(&ids);
        tok_vocab_free(v);
    }
    cJSON_Delete(j);
    return 0;
}
