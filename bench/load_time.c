/* bench/load_time.c: how long model_load and the tokenizer take, and the
 * resident memory after touching every weight byte once, for a GGUF file or
 * a Hugging Face folder (docs/benchmarks.md, "Hugging Face folders").
 *
 *   load_time MODEL [REPS]
 *
 * Prints, per repetition: model_load ms, tok_load_model ms, the ms to read
 * one byte of every 4 KiB page of every weight (first touch of the
 * mapping), and VmRSS / VmHWM from /proc/self/status after it. */
#include "core/status.h"
#include "core/timer.h"
#include "models/model.h"
#include "ops/ops.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)))
            v = atol(line + strlen(key) + 1);
    if (f)
        fclose(f);
    return v;
}

static volatile unsigned sink;

static void touch(const struct model_weight *w)
{
    for (int64_t e = 0; w->data && e < w->n_expert; e++) { /* a folder's experts lie apart */
        struct model_weight one = ops_weight_expert(w, e);
        const unsigned char *p = one.data;
        for (size_t i = 0; i < model_weight_size(&one); i += 4096)
            sink += p[i];
    }
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fprintf(stderr, "usage: load_time MODEL [REPS]\n"), IG_E_USAGE;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    printf("load_ms tokenizer_ms touch_ms rss_mib hwm_mib\n");
    for (int r = 0; r < reps; r++) {
        struct model *m;
        struct tok_vocab *v;
        int64_t t0 = ig_now_ns();
        int st = model_load(argv[1], &m);
        if (st)
            return st;
        int64_t t1 = ig_now_ns();
        if ((st = tok_load_model(m, &v)))
            return st;
        int64_t t2 = ig_now_ns();
        struct model_tensor_it it;
        for (model_tensors_begin(&it, m, MODEL_TENSORS_ALL); model_tensors_next(&it);)
            touch(it.w);
        int64_t t3 = ig_now_ns();
        printf("%.2f %.2f %.2f %.1f %.1f\n", (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6,
               (double)(t3 - t2) / 1e6, status_kb("VmRSS:") / 1024.0, status_kb("VmHWM:") / 1024.0);
        tok_vocab_free(v);
        model_free(m);
    }
    return 0;
}
