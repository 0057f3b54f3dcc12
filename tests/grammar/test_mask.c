/* tests/grammar/test_mask.c: token masks against a brute-force check of
 * every vocabulary entry. For each grammar, random walks (seeded) through
 * the text it allows; at every state the matcher's mask (trie walk, cut
 * masks, caches) must equal, token by token, what a separate automaton says
 * when each token's bytes are fed to it one by one (no trie, no cuts, no
 * shared tables). Also: the first-token space-prefix rule on a small
 * SentencePiece vocabulary built here, and a matcher that drops its tables
 * (a tiny budget) keeps giving the same masks.
 *
 *   test_mask [MODEL.gguf]   default: the fetched model (exit 77 without it)
 */
#include "core/paths.h"
#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/internal.h"
#include "grammar/matcher.h"
#include "grammar/pda.h"
#include "models/gguf.h"
#include "tests/test.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The reference: a fresh automaton fed the whole text so far, then each
 * token's bytes. */
struct ref {
    struct gr_pda p;
    int32_t state;
};

static void ref_init(struct ref *r, const struct grammar *g)
{
    IG_ASSERT(gr_pda_init(&r->p, g) == IG_OK);
    r->state = gr_pda_start(&r->p);
    IG_ASSERT(r->state >= 0);
}

static int32_t ref_run(struct ref *r, int32_t s, const uint8_t *b, int64_t n)
{
    for (int64_t i = 0; i < n && s > GR_DEAD; i++)
        s = gr_pda_step(&r->p, s, r->p.g->byte_class[b[i]]);
    IG_ASSERT(s >= 0);
    return s;
}

/* The token's bytes as text, first-token rule included. */
static void token_bytes(const struct tok_vocab *v, int32_t id, bool first, char *buf,
                        int64_t *n)
{
    enum tok_type t = tok_type_of(v, id);
    if (t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNUSED || t == TOK_TYPE_UNKNOWN) {
        *n = 0;
        return;
    }
    *n = tok_piece(v, id, false, buf, 4096);
    if (*n > GR_MAX_TOKEN_BYTES)
        *n = 0;
    if (first && *n > 0 && buf[0] == ' ' && tok_first_piece_drops_space(v, id)) {
        memmove(buf, buf + 1, (size_t)*n - 1);
        (*n)--;
    }
}

/* Compares the mask over the whole vocabulary; returns the allowed ids. */
static int64_t check_state(struct grammar_matcher *m, struct ref *r, const struct tok_vocab *v,
                           bool first, bool allow_eog, float *logits, int32_t *allowed,
                           const char *what, int step)
{
    int64_t n = tok_n_tokens(v);
    for (int64_t i = 0; i < n; i++)
        logits[i] = 0;
    int64_t count = grammar_matcher_mask(m, logits);
    int64_t k = 0, bad = 0;
    char buf[4096];
    for (int32_t id = 0; id < n; id++) {
        bool want;
        if (tok_is_eog(v, id)) {
            want = allow_eog && gr_pda_complete(&r->p, r->state);
        } else {
            int64_t len;
            token_bytes(v, id, first, buf, &len);
            want = len > 0 && ref_run(r, r->state, (const uint8_t *)buf, len) > GR_DEAD;
        }
        bool got = logits[id] != -INFINITY;
        if (got != want && bad++ < 5)
            fprintf(stderr, "FAIL %s step %d: token %d: mask says %d, bytes say %d\n", what,
                    step, id, got, want);
        if (want)
            allowed[k++] = id;
    }
    CHECKF(bad == 0, "%s step %d: %lld tokens disagree", what, step, (long long)bad);
    CHECKF(count == k, "%s step %d: mask counted %lld allowed, %lld are", what, step,
           (long long)count, (long long)k);
    return k;
}

/* The shortcuts the walks ran (matcher.h), summed over walk_grammar's
 * matchers since the last reset. */
static int64_t plain_walks, top_cuts;

/* Random walks: at each state check the mask, then take a random allowed
 * token (end-of-generation ends the walk). */
static void walk_grammar(const struct grammar *g, const struct grammar_vocab *gv,
                         const struct tok_vocab *v, const char *what, int walks, int steps,
                         uint64_t seed)
{
    int64_t n = tok_n_tokens(v);
    float *logits = malloc((size_t)n * sizeof *logits);
    int32_t *allowed = malloc((size_t)n * sizeof *allowed);
    IG_ASSERT(logits && allowed);
    char buf[4096];
    for (int w = 0; w < walks; w++) {
        bool allow_eog = w % 2 == 0;
        struct grammar_matcher *m;
        IG_ASSERT(grammar_matcher_create(g, gv, allow_eog, &m) == IG_OK);
        if (w == 1) /* drop every table before each mask */
            gr_matcher_set_budget(m, 1);
        struct ref r;
        ref_init(&r, g);
        bool first = true;
        for (int s = 0; s < steps; s++) {
            int64_t k = check_state(m, &r, v, first, allow_eog, logits, allowed, what, s);
            CHECKF(grammar_matcher_complete(m) == gr_pda_complete(&r.p, r.state),
                   "%s step %d: complete differs", what, s);
            if (k == 0 || grammar_matcher_done(m))
                break;
            /* prefer short tokens now and then, so walks also end */
            int32_t id = allowed[test_rand_u64(&seed) % (uint64_t)k];
            if (test_rand_u64(&seed) % 3 == 0) {
                for (int tries = 0; tries < 8; tries++) {
                    int32_t c = allowed[test_rand_u64(&seed) % (uint64_t)k];
                    if (tok_is_eog(v, c) || tok_piece(v, c, false, buf, sizeof buf) <= 2) {
                        id = c;
                        break;
                    }
                }
            }
            if (tok_is_eog(v, id)) {
                CHECK(grammar_matcher_accept(m, id) == IG_OK);
                break;
            }
            int64_t len;
            token_bytes(v, id, first, buf, &len);
            CHECKF(grammar_matcher_accept(m, id) == IG_OK, "%s step %d: accept %d", what, s, id);
            r.state = ref_run(&r, r.state, (const uint8_t *)buf, len);
            first = false;
        }
        gr_pda_free(&r.p);
        plain_walks += m->n_plain_walks;
        top_cuts += m->n_top_cut;
        grammar_matcher_free(m);
    }
    free(logits);
    free(allowed);
}

/* The memo of pda.c against steps computed afresh, on random bytes. */
static void check_memo(const struct grammar *g, uint64_t seed)
{
    struct gr_pda p;
    IG_ASSERT(gr_pda_init(&p, g) == IG_OK);
    int32_t s = gr_pda_start(&p);
    for (int i = 0; i < 2000 && s > GR_DEAD; i++) {
        int c = (int)(test_rand_u64(&seed) % (uint64_t)g->n_classes);
        int32_t a = gr_pda_step(&p, s, c), b = gr_pda_step_uncached(&p, s, c);
        CHECKF(a == b, "memoized step %d != fresh %d", a, b);
        if (a > GR_DEAD)
            s = a;
        else if (test_rand_u64(&seed) % 4 == 0)
            s = gr_pda_start(&p);
    }
    gr_pda_free(&p);
}

static struct grammar *gbnf(const char *text)
{
    struct grammar *g;
    IG_ASSERT(grammar_from_gbnf(text, strlen(text), "test", &g) == IG_OK);
    return g;
}

static struct grammar *schema(const char *text)
{
    struct grammar *g;
    IG_ASSERT(grammar_from_json_schema(text, strlen(text), "test", &g) == IG_OK);
    return g;
}

/* A small SentencePiece vocabulary whose space prefix makes "▁ab" print
 * "ab" as the first token and " ab" later. */
static void test_space_prefix(void)
{
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "ab", "ab", "a",
                                       "b", "\xE2\x96\x81", "<0x20>"};
    enum { N = sizeof toks / sizeof toks[0] };
    struct tok_str t[N];
    int32_t types[N];
    float scores[N];
    for (int i = 0; i < N; i++) {
        t[i] = (struct tok_str){toks[i], strlen(toks[i])};
        types[i] = i == 0 ? TOK_TYPE_UNKNOWN : i < 3 ? TOK_TYPE_CONTROL
                 : i == 8 ? TOK_TYPE_BYTE : TOK_TYPE_NORMAL;
        scores[i] = (float)-i;
    }
    struct tok_vocab_desc d;
    tok_vocab_desc_init(&d);
    d.model = "llama";
    d.n_tokens = N;
    d.tokens = t;
    d.types = types;
    d.scores = scores;
    d.unk_id = 0, d.bos_id = 1, d.eos_id = 2;
    d.add_space_prefix = 1;
    struct tok_vocab *v;
    IG_ASSERT(tok_vocab_build(&d, &v) == IG_OK);
    struct grammar_vocab *gv;
    IG_ASSERT(grammar_vocab_build(v, &gv) == IG_OK);
    struct grammar *g = gbnf("root ::= \"ab\" (\" ab\")*\n");
    walk_grammar(g, gv, v, "space prefix", 6, 6, 7);
    /* by hand: first "▁ab" (3) and "ab" (4) are allowed, "<0x20>" (8) not */
    struct grammar_matcher *m;
    IG_ASSERT(grammar_matcher_create(g, gv, true, &m) == IG_OK);
    float l[N] = {0};
    grammar_matcher_mask(m, l);
    CHECK(l[3] == 0 && l[4] == 0 && l[5] == 0 && l[8] == -INFINITY && l[2] == -INFINITY);
    CHECK(grammar_matcher_accept(m, 3) == IG_OK);
    for (int i = 0; i < N; i++)
        l[i] = 0;
    grammar_matcher_mask(m, l); /* now "▁ab" is " ab" */
    CHECK(l[3] == 0 && l[4] == -INFINITY && l[8] == 0 && l[2] == 0);
    grammar_matcher_free(m);
    grammar_free(g);
    grammar_vocab_free(gv);
    tok_vocab_free(v);
}

static const char *const corpus_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":130},\"tags\":{\"type\":\"array\","
    "\"items\":{\"enum\":[\"a\",\"b\",null]},\"maxItems\":3}},\"required\":[\"name\"]}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},"
    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},"
    "\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}",
    "{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"boolean\"},"
    "{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"x\"}},\"additionalProperties\":true}]}",
    "{}",
};

/* Strings: JSON string content near and far from a maxLength, where masks
 * take the content tokens from gv->plain_upto and decide characters beyond
 * ASCII on top-cut states, and grammars that look alike but must not
 * (content that goes on after the bound, a character that does not end the
 * class's frame, a narrower or wider character set). */
static void test_strings(const struct grammar_vocab *gv, const struct tok_vocab *v)
{
    static const char *const fast[] = {
        "{\"type\":\"string\",\"minLength\":2,\"maxLength\":9}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"maxItems\":3}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":70},"
        "\"b\":{\"type\":\"string\"}},\"required\":[\"a\",\"b\"]}",
    };
    for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "string schema %zu", i);
        struct grammar *g = schema(fast[i]);
        plain_walks = top_cuts = 0;
        walk_grammar(g, gv, v, what, 4, 40, 300 + i);
        CHECKF(plain_walks > 0, "%s: no walk took the string content shortcut", what);
        CHECKF(top_cuts > 0, "%s: no top-cut state decided the characters beyond ASCII", what);
        grammar_free(g);
    }
    struct grammar *g = gbnf("root ::= \"\\\"\" [^\"\\\\\\x7F\\x00-\\x1F]{0,8} \"\\\"\"\n");
    plain_walks = 0;
    walk_grammar(g, gv, v, "gbnf string", 4, 20, 310);
    CHECK(plain_walks > 0);
    grammar_free(g);
    static const char *const alike[] = {
        /* content goes on after the bound: not decided by length */
        "root ::= \"\\\"\" [^\"\\\\\\x7F\\x00-\\x1F]{0,5} [a-z]* \"\\\"\"\n",
        /* "é" may also start "éx": the character does not end the frame */
        "root ::= \"\\\"\" ([^\"\\\\\\x7F\\x00-\\x1F] | \"éx\"){0,6} \"\\\"\"\n",
        /* narrower (no '~') and wider (tab too) than JSON string content */
        "root ::= \"\\\"\" [^\"\\\\~\\x7F\\x00-\\x1F]{0,7} \"\\\"\"\n",
        "root ::= \"\\\"\" [^\"\\\\\\x7F\\x00-\\x08\\x0A-\\x1F]{0,7} \"\\\"\"\n",
        /* a character beyond ASCII ends its class's frame, but "!" must
         * follow it: it leads elsewhere than an ASCII one (top-cut decided) */
        "root ::= \"\\\"\" ([ -!#-\\[\\]-~] | [^\\x00-\\x7F] \"!\"){0,6} \"\\\"\"\n",
        /* characters beyond ASCII only some of them */
        "root ::= \"\\\"\" ([ -!#-\\[\\]-~] | [α-ω]){0,7} \"\\\"\"\n",
    };
    for (size_t i = 0; i < sizeof alike / sizeof alike[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "string alike %zu", i);
        g = gbnf(alike[i]);
        plain_walks = 0;
        walk_grammar(g, gv, v, what, 3, 16, 320 + i);
        CHECKF(plain_walks == 0, "%s: took the JSON string content shortcut", what);
        grammar_free(g);
    }
}

int main(int argc, char **argv)
{
    test_space_prefix();

    char path[4096];
    if (argc > 1)
        snprintf(path, sizeof path, "%s", argv[1]);
    else if (ig_default_model_path(path, sizeof path) != IG_OK)
        return 77;
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "skip: no model at %s\n", path);
        return 77;
    }
    struct gguf_file *f;
    IG_ASSERT(gguf_open(path, &f, NULL) == IG_OK);
    struct tok_vocab *v;
    IG_ASSERT(tok_load_gguf(f, &v) == IG_OK);
    struct grammar_vocab *gv;
    IG_ASSERT(grammar_vocab_build(v, &gv) == IG_OK);

    struct grammar *g = gbnf(
        "root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= factor ([*/] factor)*\n"
        "factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor\n");
    walk_grammar(g, gv, v, "arithmetic", 3, 12, 1);
    check_memo(g, 11);
    grammar_free(g);
    g = gbnf("root ::= [^\\n,]* (\",\" [^\\n,]*)* (\"\\n\" [^\\n,]* (\",\" [^\\n,]*)*){0,3}\n");
    walk_grammar(g, gv, v, "csv", 3, 10, 2);
    grammar_free(g);
    g = gbnf("root ::= (\"é\" | [α-ω] | [\\U0001F600-\\U0001F64F] | \"日本\")+ \".\"\n");
    walk_grammar(g, gv, v, "utf8", 4, 10, 3);
    check_memo(g, 12);
    grammar_free(g);
    for (size_t i = 0; i < sizeof corpus_schemas / sizeof corpus_schemas[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "schema %zu", i);
        g = schema(corpus_schemas[i]);
        walk_grammar(g, gv, v, what, 3, 14, 100 + i);
        check_memo(g, 200 + i);
        grammar_free(g);
    }
    test_strings(gv, v);
    grammar_vocab_free(gv);
    tok_vocab_free(v);
    gguf_close(f);
    return test_summary("test_mask");
}
