/* cli/run.h: what the generating commands share inside cli/ (cmd_run.c,
 * cmd_batch.c, run_report.c): the request's report, the prompt a request
 * renders to, and the model a command runs. */
#ifndef IGNITE_CLI_RUN_H
#define IGNITE_CLI_RUN_H

#include "cli/gen_opts.h"
#include "core/strbuf.h"
#include "tokenizer/chat_template.h"
#include "generate/generate.h"
#include "generate/harmony.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model;
struct tok_vocab;
struct run_channels;

/* What the run report prints besides a request's result. */
struct run_report {
    const struct gen_result *res;
    const struct sampler_params *sp; /* sp->seed is the seed used */
    const char *model_path; /* the model file or folder, as run loaded it */
    const struct model *m;
    const char *device;  /* "cpu" */
    int threads;
    int64_t n_ctx;
    size_t kv_bytes;     /* KV cache memory the request held */
    double kv_max_bytes; /* what the whole context would need */
    const struct kv_memory *kv_mem; /* the pool's layers and types */
    double kv_load_ms;   /* reading --load-kv, 0 if none */
    double kv_save_ms;   /* writing --save-kv, 0 if none */
    size_t device_bytes; /* device memory held (CUDA; 0 on the CPU) */
    size_t weight_bytes; /* of which the weights */
    const char *gpu_weights; /* "native" or "f16" on CUDA, NULL on the CPU */
    const char *text;    /* generated text (--json), len bytes, any bytes */
    size_t len;
    int status;          /* the exit status the run ends with */
    bool write_failed;   /* stdout failed other than EPIPE: stop output_error */
    const struct run_channels *channels; /* a harmony chat's, or NULL */
};

/* The one stats line on stderr (format in docs/cli.md). */
void run_print_stats(const struct run_report *r);

/* The keys a run's --json object and a batch line share: text, stop,
 * status, tokens, timings, sampling. NULL when out of memory. */
cJSON *run_result_json(const struct gen_result *res, const struct sampler_params *sp,
                       const char *text, size_t len, int status);

/* The --json object on stdout. Returns IG_OK (also when the reader has gone:
 * EPIPE), IG_E_NOMEM or IG_E_IO. */
int run_print_json(const struct run_report *r);

/* The model and vocabulary a generating command runs: `path` loaded, its
 * tokenizer, the vocabulary size checked against the embedding rows. */
int run_load_model(const char *path, struct model **m, struct tok_vocab **vocab);

/* The chat template a command renders with: --chat-template NAME,
 * --chat-template-file FILE (read and parsed here), or the model's own
 * (Jinja when it parses, else its family's hand-written renderer). */
struct run_chat {
    struct chat_tmpl t;
    char *file_text;       /* --chat-template-file's text, owned */
    char bos[128], eos[128];
    char name[4200];       /* how messages name the template (a file's path) */
    char why[320];         /* the model's template: why Jinja refused it */
    const char *model_path; /* the model's, borrowed */
    bool missing, folder;  /* the model has no template; it is a folder */
    bool harmony;          /* a harmony template (gpt-oss): answers come in channels */
};

/* Chooses the template for the options and model. IG_OK, or IG_E_IO /
 * IG_E_USAGE for a --chat-template-file that cannot be read or parsed (one
 * line naming the construct and its line:col). A model without a usable
 * template is reported when a chat prompt is rendered. */
int run_chat_setup(const struct gen_cli *o, const struct model *m, const struct tok_vocab *v,
                   struct run_chat *c);
void run_chat_free(struct run_chat *c);

/* The text the tokenizer sees for `user`: as given, or wrapped by the chat
 * template with `system` (may be NULL) and, with no_think, its thinking
 * switch off (Qwen3). *text is malloc'd. Returns IG_OK, IG_E_MODEL (no or
 * an unusable template) or IG_E_USAGE (a template that fails, no_think on
 * a template without the switch). */
int run_render_prompt(const struct run_chat *c, bool chat, bool no_think, const char *system,
                      const char *user, char **text);

/* Encoding flags for a prompt of these options. */
unsigned run_encode_flags(const struct gen_cli *o);

/* The next user turn of a chat continued from a cache (--load-kv --chat,
 * `ignite chat`): *text is malloc'd, to be encoded without adding BOS
 * (where the template wants one inside the conversation, its text is in
 * *text); `last` is the last token in the cache (an end-of-generation
 * token: the model closed its answer); `system` the conversation's system
 * message (NULL: none). IG_OK, IG_E_MODEL, IG_E_USAGE, IG_E_NOMEM. */
int run_render_next(const struct run_chat *c, const struct tok_vocab *vocab, int32_t last,
                    const char *system, bool no_think, const char *user, char **text);

/* --verbose-prompt: the text the tokenizer sees (escaped, one line) and its
 * token ids with their pieces, to stderr. */
void run_print_prompt(const struct tok_vocab *vocab, const char *text, const int32_t *ids,
                      int64_t n);

/* A warning when `n` tokens pass the positions the model was trained on
 * but fit the context `n_ctx` (past it the prompt is refused: no warning). */
void run_warn_train_ctx(const struct model *m, int64_t n, int64_t n_ctx);

/* Generated text on its way to stdout (cli/stream.c): a flush per token,
 * the first write error kept; on a terminal the prefill's progress line
 * (stderr) and a newline before any diagnostic while the text's line is
 * open (run_stream_init installs that hook, run_stream_done removes it). */
struct run_stream {
    bool tty;          /* stdout is a terminal */
    bool wrote;        /* some text reached stdout */
    bool mid_line;     /* the last byte written was not a newline */
    bool owe_newline;  /* the newline after the text is still to come */
    int write_errno;   /* of the first failed write, 0 if none */
    struct cli_progress progress;
};
void run_stream_init(struct run_stream *s, bool progress);
void run_stream_done(struct run_stream *s);
/* Writes and flushes text; 0, or 1 after a failed write (write_errno). */
int run_stream_write(struct run_stream *s, const char *text, size_t len);
/* The newline after the text, when one is owed. */
void run_stream_end_line(struct run_stream *s);
/* After a step: the progress line of a prefill of `total` tokens, when due. */
void run_stream_prefill(struct run_stream *s, const struct gen_result *res, int64_t total);

/* A harmony chat's answer by channel (cli/channels.c; generate/harmony.h):
 * the final channel's text to `final` (the command's stdout or --json
 * buffer), the analysis kept (--json's "analysis", a batch line's) and, with
 * --verbose, every other channel's text on stderr after "[analysis] " (or
 * "[other] "); the answer as the model wrote it kept in `raw`. With on
 * false the text goes to `final` as it is. The request must have asked for
 * special_text. */
struct run_channels {
    bool on, verbose;
    int (*final)(void *user, const char *text, size_t len); /* 0 to go on */
    void *user;
    struct harmony h;
    struct ig_str analysis, raw;
    bool nomem;                 /* analysis or raw lost text: out of memory */
    bool err_open;              /* a "[channel] " line is open on stderr */
    enum harmony_channel err_ch;
};
void run_channels_init(struct run_channels *c, bool on, bool verbose,
                       int (*final)(void *user, const char *text, size_t len), void *user);
/* The request's text in order; returns final's non-zero answer, else 0. */
int run_channels_text(struct run_channels *c, const char *text, size_t len);
/* The end of the request's text (a held-back start of a marker). */
int run_channels_finish(struct run_channels *c);
void run_channels_free(struct run_channels *c);
/* A harmony conversation's cache, tokens[0..n) (cli/harmony_history.c):
 * where its last answer began (*at: after the last user turn's
 * "<|start|>assistant"; 0 when there is none) and that answer's final
 * channel text (*answer, malloc'd; NULL when none). IG_OK or IG_E_NOMEM. */
int run_harmony_last_answer(struct tok_vocab *v, const int32_t *tokens, int64_t n,
                            int64_t *at, char **answer);
/* A harmony answer's "analysis" and "raw" keys on a --json object or batch
 * line (none when off). IG_OK or IG_E_NOMEM. */
int run_channels_json(cJSON *o, const struct run_channels *c);

#endif
