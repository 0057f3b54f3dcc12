/* tests/fuzz/fuzz_jinja.c: libFuzzer entry for the Jinja chat-template
 * renderer (tokenizer/jinja.h): the input is a template, rendered for a
 * fixed three-message conversation with the generation prompt on and off.
 * A template outside the subset, or one that fails, must be refused cleanly
 * (a status and one line, silenced here); every loop, string and the output
 * are bounded, so no input may hang or exhaust memory; any sanitizer report
 * is a bug. Built by scripts/fuzz.sh (clang, libFuzzer); fuzz_replay.c runs
 * the same entry in ordinary and ASan builds over tests/fuzz/corpus_jinja. */
#include "core/status.h"
#include "tokenizer/jinja.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct chat_message msgs[] = {
        {"system", "Be brief."}, {"user", " Hello \xe2\x80\x94 there! "}, {"assistant", "Hi."}};
    ig_status_quiet(1);
    for (int gen = 0; gen < 2; gen++) {
        struct jinja_input in = {.messages = msgs, .n_messages = gen ? 3 : 2,
                                 .add_generation_prompt = gen, .bos_token = "<s>",
                                 .eos_token = "</s>", .enable_thinking = gen ? -1 : 0};
        char *out = NULL;
        if (jinja_render((const char *)data, size, "fuzz", &in, &out) == IG_OK)
            free(out);
    }
    return 0;
}
