/* tests/fuzz/fuzz_kvfile.c: libFuzzer entry for the saved KV cache reader
 * (kvcache/kvfile.c), which takes files and pipes from other machines
 * (`--load-kv -`): any bytes as a stream, read against a fixed small model
 * (2 layers, 2 KV heads of 8, a vocabulary of 64, the model id 0, 1, ...,
 * 31), version 1 or 2. A file that is taken must hold what generation
 * relies on: its layers the model's, token ids inside the vocabulary, the
 * checksum right, nothing after it, a store of the model's layers at the
 * file's dtype. A refusal says why in one line and leaves no store. The
 * body is read only for headers the input could back (a real caller checks
 * against its context first, cli/cmd_run.c). fuzz_replay.c runs it over
 * tests/fuzz/corpus_kvfile in ordinary and ASan builds. */
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused(int st, const char *msg)
{
    if (st == IG_OK || !msg[0] || strchr(msg, '\n'))
        abort(); /* a refusal always says why, in one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    struct kv_memory *mem = NULL;
    if (kv_memory_uniform(KV_F32, 2, 2, 8, &mem) != IG_OK)
        abort();
    const int64_t n_vocab = 64;
    unsigned char id[KV_MODEL_ID_BYTES];
    for (int i = 0; i < KV_MODEL_ID_BYTES; i++)
        id[i] = (unsigned char)i;
    char msg[1024] = "";
    ig_error_capture(msg, sizeof msg);
    FILE *f = fmemopen((void *)data, size, "rb");
    struct kv_file_reader r;
    struct kv_store *st = NULL;
    int32_t *tokens = NULL;
    float logits[64];
    int s = f ? kv_file_read_header(&r, f, "'fuzz'", mem, n_vocab, id) : IG_E_IO;
    if (s != IG_OK) {
        if (f)
            refused(s, msg);
        goto done;
    }
    if (r.hdr.n_layer != mem->n_layer || r.hdr.n_tokens < 1 ||
        (r.hdr.n_vocab != 0 && r.hdr.n_vocab != n_vocab))
        abort(); /* a header that does not fit the model was taken */
    if ((uint64_t)r.hdr.n_tokens > size) /* more tokens than bytes: truncated for sure */
        goto done;
    tokens = malloc((size_t)r.hdr.n_tokens * sizeof *tokens);
    if (!tokens)
        goto done;
    msg[0] = '\0';
    s = kv_file_read_body(&r, &st, tokens, logits);
    if (s != IG_OK) {
        if (st)
            abort(); /* a refused body leaves no store */
        refused(s, msg);
        goto done;
    }
    if (!st || !kv_memory_same_layers(st->memory, mem) || st->memory->dtype != r.hdr.dtype)
        abort();
    for (int64_t i = 0; i < r.hdr.n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            abort();
done:
    ig_error_capture(NULL, 0);
    kv_store_free(st);
    kv_memory_free(mem);
    free(tokens);
    if (f)
        fclose(f);
    return 0;
}
