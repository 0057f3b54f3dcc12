/* tests/fuzz/fuzz_grammar.c: libFuzzer entries for the grammar room.
 *
 * FUZZ_SCHEMA undefined (fuzz_grammar): the input up to its first NUL byte
 * is GBNF; when it compiles, the bytes after the NUL are run through the
 * automaton (steps, cuts and top-cuts, the states' tables capped), so parse, checks
 * and matcher all see hostile input. FUZZ_SCHEMA defined (fuzz_schema): the
 * same with a JSON schema before the NUL. A grammar or schema that is
 * refused must be refused cleanly (a status, one line); any sanitizer
 * report is a bug. Built by scripts/fuzz.sh (clang, libFuzzer);
 * fuzz_replay.c runs the same entries in ordinary and ASan builds. */
#include "grammar/grammar.h"
#include "grammar/internal.h"
#include "grammar/pda.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    struct grammar *g = NULL;
#ifdef FUZZ_SCHEMA
    int st = grammar_from_json_schema((const char *)data, glen, "fuzz", &g);
#else
    int st = grammar_from_gbnf((const char *)data, glen, "fuzz", &g);
#endif
    if (st != 0)
        return 0;
    struct gr_pda p;
    if (gr_pda_init(&p, g) == 0) {
        int32_t s = gr_pda_start(&p);
        const uint8_t *text = nul ? nul + 1 : data + size;
        size_t n = nul ? size - glen - 1 : 0;
        for (size_t i = 0; i < n && i < 512 && s > GR_DEAD && p.n_states < 20000; i++) {
            int32_t t = gr_pda_step(&p, s, g->byte_class[text[i]]);
            if (t > GR_DEAD) {
                (void)gr_pda_cut(&p, t);
                int32_t parent = -1, top = gr_pda_top_cut(&p, t, &parent);
                if (top > GR_DEAD)
                    (void)gr_pda_pops_to(&p, t, text[i], parent);
                s = t;
            }
        }
        gr_pda_free(&p);
    }
    grammar_free(g);
    return 0;
}
