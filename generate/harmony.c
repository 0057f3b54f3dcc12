/* generate/harmony.c: harmony's channels split from streamed text, byte by
 * byte (the rules are in harmony.h). Leaves where each channel goes to the
 * caller (cli/channels.c). Covered by tests/generate/test_harmony.c. */
#include "generate/harmony.h"

#include <string.h>

enum {
    ST_START,  /* nothing yet: a marker opens a header, text a final body */
    ST_HEADER, /* between <|start|> / <|channel|> and <|message|> */
    ST_BODY,   /* a message's text, of channel h->ch */
    ST_OUT,    /* after a body's end: text is dropped */
};

#define NAME_MAX_BYTES 32

/* Body text on its way out: gathered, emitted in runs of one channel. */
struct sink {
    harmony_emit_fn emit;
    void *user;
    enum harmony_channel ch;
    char buf[256];
    size_t n;
    int rc; /* the first non-zero emit result */
};

static void flush(struct sink *o)
{
    if (o->n && !o->rc)
        o->rc = o->emit(o->user, o->ch, o->buf, o->n);
    o->n = 0;
}

static void put(struct sink *o, enum harmony_channel ch, char c)
{
    if (o->n && (o->ch != ch || o->n == sizeof o->buf))
        flush(o);
    o->ch = ch;
    o->buf[o->n++] = c;
}

void harmony_init(struct harmony *h)
{
    memset(h, 0, sizeof *h);
    h->state = ST_START;
    h->ch = HARMONY_FINAL;
}

const char *harmony_channel_name(enum harmony_channel ch)
{
    return ch == HARMONY_FINAL ? "final" : ch == HARMONY_ANALYSIS ? "analysis" : "other";
}

static void header_add(struct harmony *h, const char *s, size_t n)
{
    size_t room = sizeof h->header - 1 - h->n_header;
    n = n < room ? n : room;
    memcpy(h->header + h->n_header, s, n);
    h->n_header += n;
    h->header[h->n_header] = '\0';
}

/* The channel a finished header names (harmony.h, "channel"). */
static enum harmony_channel header_channel(const struct harmony *h)
{
    static const char mark[] = "<|channel|>";
    const char *hd = h->header, *name = NULL;
    for (const char *p = hd; (p = strstr(p, mark)); p += sizeof mark - 1)
        name = p + sizeof mark - 1;
    bool recipient = !strncmp(hd, "to=", 3) || strstr(hd, " to=") != NULL;
    if (recipient)
        return HARMONY_OTHER;
    if (!name)
        return HARMONY_FINAL;
    size_t n = strcspn(name, " <");
    if ((n == 5 && !strncmp(name, "final", 5)) || (n == 10 && !strncmp(name, "commentary", 10)))
        return HARMONY_FINAL;
    if (n == 8 && !strncmp(name, "analysis", 8))
        return HARMONY_ANALYSIS;
    return HARMONY_OTHER;
}

static void on_marker(struct harmony *h, struct sink *o, const char *m, size_t n)
{
    const char *name = m + 2;
    size_t k = n - 4;
#define IS(s) (k == sizeof(s) - 1 && !memcmp(name, s, k))
    flush(o);
    if (IS("start")) {
        h->state = ST_HEADER;
        h->n_header = 0;
        h->header[0] = '\0';
    } else if (IS("channel")) {
        if (h->state != ST_HEADER && h->state != ST_START) {
            h->state = ST_HEADER;
            h->n_header = 0;
            h->header[0] = '\0';
        }
        h->state = ST_HEADER;
        header_add(h, m, n);
    } else if (IS("constrain")) {
        if (h->state == ST_HEADER)
            header_add(h, m, n);
    } else if (IS("message")) {
        if (h->state != ST_BODY) {
            h->ch = h->state != ST_OUT ? header_channel(h) : HARMONY_FINAL;
            h->state = ST_BODY;
        }
    } else if (IS("end") || IS("return") || IS("call")) {
        h->state = ST_OUT;
    } /* any other marker: dropped */
#undef IS
}

/* The start of the output: a role header's recipient (" to=...", a tool
 * call) is held as header; anything else is a final body, and what was
 * held goes out first. */
static const char RECIPIENT[] = " to=";

static void on_text(struct harmony *h, struct sink *o, char c)
{
    if (h->state == ST_START) {
        size_t k = h->n_header;
        if (k >= sizeof RECIPIENT - 1 || c == RECIPIENT[k]) {
            header_add(h, &c, 1);
            return;
        }
        h->state = ST_BODY;
        h->ch = HARMONY_FINAL;
        for (size_t i = 0; i < k; i++)
            put(o, HARMONY_FINAL, h->header[i]);
        h->n_header = 0;
        h->header[0] = '\0';
    }
    if (h->state == ST_BODY)
        put(o, h->ch, c);
    else if (h->state == ST_HEADER)
        header_add(h, &c, 1);
}

static bool name_byte(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* What pend[0..n) is: 0 a marker's start so far, 1 a whole marker, -1 not one. */
static int classify(const char *p, size_t n)
{
    if (n < 2)
        return 0;
    if (p[1] != '|')
        return -1;
    size_t i = 2;
    while (i < n && name_byte(p[i]))
        i++;
    size_t name = i - 2;
    if (name > NAME_MAX_BYTES)
        return -1;
    if (i == n)
        return 0;
    if (p[i] != '|' || name == 0)
        return -1;
    if (++i == n)
        return 0;
    return p[i] == '>' && i + 1 == n ? 1 : -1;
}

static void feed(struct harmony *h, struct sink *o, char c)
{
    if (!h->n_pend && c != '<') {
        on_text(h, o, c);
        return;
    }
    h->pend[h->n_pend++] = c;
    int k = classify(h->pend, h->n_pend);
    if (k == 0)
        return;
    if (k == 1) {
        size_t n = h->n_pend;
        h->n_pend = 0;
        on_marker(h, o, h->pend, n);
        return;
    }
    /* not a marker: its '<' is text, and the rest is looked at again (it
     * may hold the next marker's start) */
    char rest[HARMONY_MARKER_MAX + 1];
    size_t n = h->n_pend - 1;
    memcpy(rest, h->pend + 1, n);
    h->n_pend = 0;
    on_text(h, o, '<');
    for (size_t i = 0; i < n; i++)
        feed(h, o, rest[i]);
}

int harmony_push(struct harmony *h, const char *text, size_t len, harmony_emit_fn emit,
                 void *user)
{
    struct sink o = {.emit = emit, .user = user};
    for (size_t i = 0; i < len && !o.rc; i++)
        feed(h, &o, text[i]);
    flush(&o);
    return o.rc;
}

int harmony_finish(struct harmony *h, harmony_emit_fn emit, void *user)
{
    struct sink o = {.emit = emit, .user = user};
    char rest[HARMONY_MARKER_MAX + 1];
    size_t n = h->n_pend;
    memcpy(rest, h->pend, n);
    h->n_pend = 0;
    for (size_t i = 0; i < n; i++)
        on_text(h, &o, rest[i]);
    if (h->state == ST_START) /* a recipient's start that never became a header */
        for (size_t i = 0; i < h->n_header; i++)
            put(&o, HARMONY_FINAL, h->header[i]);
    h->n_header = 0;
    flush(&o);
    return o.rc;
}
