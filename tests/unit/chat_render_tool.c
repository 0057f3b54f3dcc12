/* tests/unit/chat_render_tool.c: renders a chat prompt with
 * tokenizer/chat_template.c for test_chat_jinja.py.
 *   chat_render_tool [--no-think] TEMPLATE_FILE USER [SYSTEM]
 *   chat_render_tool --next closed|open TEMPLATE_FILE USER BOS
 * Prints the detected style on stderr and the rendered text (the first
 * turn, or the next one with BOS's text where the family puts it) on
 * stdout. */
#include "core/status.h"
#include "tokenizer/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct chat_opts opts = {0};
    if (argc > 1 && !strcmp(argv[1], "--no-think")) {
        opts.no_thinking = 1;
        argv++;
        argc--;
    }
    int next = argc == 6 && !strcmp(argv[1], "--next"), closed = 0;
    if (next) {
        closed = !strcmp(argv[2], "closed");
        argv += 2;
        argc -= 2;
    } else if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: chat_render_tool [--no-think] TEMPLATE_FILE USER [SYSTEM] | "
                        "--next closed|open TEMPLATE_FILE USER BOS\n");
        return IG_E_USAGE;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return ig_error(IG_E_IO, "cannot open %s", argv[1]);
    static char tmpl[1 << 16];
    size_t n = fread(tmpl, 1, sizeof tmpl, f);
    fclose(f);
    enum chat_style style = chat_detect(tmpl, n);
    fprintf(stderr, "%s\n", chat_style_name(style));
    char *out;
    int st = next ? chat_render_next(style, argv[2], closed, argv[3], &out)
                  : chat_render_opts(style, tmpl, n, argc == 4 ? argv[3] : NULL, argv[2], &opts,
                                     &out);
    if (st != IG_OK)
        return st;
    fputs(out, stdout);
    free(out);
    return IG_OK;
}
