/* generate/harmony.h: the channels of gpt-oss's harmony output, split from
 * streamed text.
 *
 * A harmony answer (the model card's format; llama.cpp's gpt-oss chat
 * parser) is a run of messages, each a header and a body:
 *
 *   <|channel|>analysis<|message|>...thinking...<|end|>
 *   <|start|>assistant<|channel|>final<|message|>...the answer...<|return|>
 *
 * The prompt ends with "<|start|>assistant", so the output starts inside a
 * header. The text is the generation with its control tokens written out
 * (the engine's special_text), in pieces cut anywhere: a marker split over
 * pieces is held back until it is whole or cannot be one.
 *
 *   markers   <|name|>, name of 1-32 bytes [a-z0-9_]: <|start|> opens a
 *             header, <|channel|> (outside a header too) opens one with a
 *             channel, <|message|> ends it and opens the body, <|end|>,
 *             <|return|>, <|call|> end the body; every marker is dropped
 *             (none reaches the output, whatever its name)
 *   channel   the name after the header's last <|channel|> (up to a space
 *             or the next marker): "final", and "commentary" without a
 *             recipient (llama.cpp's preamble: content), are HARMONY_FINAL;
 *             "analysis" is HARMONY_ANALYSIS; a header with a recipient
 *             (" to=": a tool call) or another name is HARMONY_OTHER; no
 *             channel at all is HARMONY_FINAL
 *   outside   text between a body's end and the next header is dropped;
 *             text at the very start, before any marker, is a body of
 *             HARMONY_FINAL (a model that does not write headers still
 *             says something), except a role's recipient (" to=...",
 *             a tool call in the role header), which is header
 *
 * Headers longer than HARMONY_HEADER_MAX bytes keep their first ones.
 * Covered by tests/generate/test_harmony.c (scripted streams cut at every
 * byte) and tests/cli/test_harmony_model.py (tiny random gpt-oss). */
#ifndef IGNITE_GENERATE_HARMONY_H
#define IGNITE_GENERATE_HARMONY_H

#include <stdbool.h>
#include <stddef.h>

enum harmony_channel {
    HARMONY_FINAL,    /* the answer: what a chat prints */
    HARMONY_ANALYSIS, /* the model's reasoning */
    HARMONY_OTHER,    /* tool calls, unknown channels */
};

#define HARMONY_HEADER_MAX 256
#define HARMONY_MARKER_MAX 36 /* "<|" + 32 + "|>" */

/* Where body text goes: returns 0 to go on, non-zero to stop (the push
 * returns it). */
typedef int (*harmony_emit_fn)(void *user, enum harmony_channel ch, const char *text,
                               size_t len);

struct harmony {
    int state;                          /* enum in harmony.c */
    enum harmony_channel ch;            /* the body's */
    char pend[HARMONY_MARKER_MAX + 1];  /* what may still become a marker */
    size_t n_pend;
    char header[HARMONY_HEADER_MAX];    /* the header so far, markers included */
    size_t n_header;
};

void harmony_init(struct harmony *h);

/* Adds text[0..len): emits the body text that is final, holds back a
 * possible marker's start. Returns 0, or the first non-zero emit result. */
int harmony_push(struct harmony *h, const char *text, size_t len, harmony_emit_fn emit,
                 void *user);

/* The end of the output: a held-back start that never became a marker is
 * body text after all. Returns as harmony_push. */
int harmony_finish(struct harmony *h, harmony_emit_fn emit, void *user);

/* "final", "analysis", "other". */
const char *harmony_channel_name(enum harmony_channel ch);

#endif
