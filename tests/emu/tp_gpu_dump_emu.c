/* tests/emu/tp_gpu_dump_emu.c: the emulated CUDA backend's forward, in one
 * process or tensor-parallel under mpirun (backend/gpu_tp.c), for
 * tests/tp/test_tp_gpu.py to compare.
 *
 *   tp_gpu_dump_emu -o PREFIX [-s] [-c CHUNK] [-g N] [-k TYPE [-x]] [-w f16] -m MODEL
 *                   [-m MODEL...] PROMPT_IDS
 *
 * Per model i, two sequences: A (PROMPT_IDS, prefilled in chunks of CHUNK
 * rows) and B (A's ids reversed, at most CHUNK, one step); then N decode
 * steps of both at once (each feeding the argmax of its logits), then one
 * more whose tokens come back as greedy tokens (backend_batch.greedy)
 * instead of logits. PREFIX<i>.f32 gets the float32 logits of A's and B's
 * last prefill rows and of every decode step's two rows; stdout a line
 * "greedy <i>: ..." (the tokens fed, then the last step's two). Under
 * mpirun rank 0 runs it on the ranks' backend, each rank on its own
 * emulated device, the others following (backend_tp_follow); with -s rank 0
 * first runs the same on a backend of its own alone (PREFIX<i>.one.f32,
 * "greedy <i> one: ..."): one launch gives both. -k TYPE: the pool of
 * that type (f16, q8_0, fp8) for K and V; -x then, after the last step, A's
 * cache exported (the whole model's layout, gathered from the ranks:
 * backend/tp_kv.c) into PREFIX<i>[.one].kv (each layer's K then V bytes,
 * block by block), imported into B's slot over B's blocks (each rank its
 * heads) and one more step of A's last token there, its logits appended to
 * PREFIX<i>.f32: B's blocks now hold A's rows. -w f16: the weights as f16
 * (--gpu-weights f16: no int8 activations). */
#include "backend/backend.h"
#include "backend/gpu.h"
#include "backend/tp.h"
#include "core/coll.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "models/model.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 1024

static enum kv_dtype cache = KV_F16; /* -k */
static bool exchange;                /* -x */

static int64_t parse_ids(const char *s, int32_t *ids)
{
    int64_t n = 0;
    while (*s && n < MAX_IDS) {
        char *end;
        ids[n++] = (int32_t)strtol(s, &end, 10);
        if (end == s || (*end && *end != ','))
            return -1;
        s = *end ? end + 1 : end;
    }
    return n;
}

static int32_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

struct run {
    struct backend *be;
    int64_t nv;
    FILE *out;
    float *logits; /* [2][nv] */
};

/* One step of n_seqs sequences (rows of each: n[s] tokens at pos0[s], its
 * table table[s] and state slot slot[s]: A's 0, B's 1 in every step, a
 * recurrent layer's state is the slot's), the last row of each wanting
 * logits (written to OUT) or, with greedy, its token. */
static int step(struct run *r, int n_seqs, const int32_t *const *tok, const int64_t *n,
                const int64_t *pos0, const int32_t *const *table, const int *slot,
                int32_t *greedy)
{
    int32_t rows[2 * MAX_IDS];
    struct backend_seq seqs[2];
    int64_t at = 0;
    for (int s = 0; s < n_seqs; s++) {
        memcpy(rows + at, tok[s], (size_t)n[s] * sizeof *rows);
        seqs[s] = (struct backend_seq){.table = table[s], .slot = slot[s], .row0 = at,
                                       .n_rows = n[s], .pos0 = pos0[s]};
        at += n[s];
    }
    struct backend_batch b = {.tokens = rows, .n_rows = at, .seqs = seqs, .n_seqs = n_seqs,
                              .logits = r->logits, .greedy = greedy};
    int st = backend_step(r->be, &b);
    if (st == IG_OK && !greedy &&
        fwrite(r->logits, sizeof(float), (size_t)(n_seqs * r->nv), r->out) !=
            (size_t)(n_seqs * r->nv))
        st = ig_error(IG_E_IO, "short write of logits");
    return st;
}

static enum backend_gpu_weights weights = BACKEND_GPU_NATIVE;

/* The -x round trip of dump(): A's cache (n_pos positions, slot 0, table
 * tab[0]) exported, its bytes written to kv_path, a copy imported into slot
 * 1 (table tab[1]), then `tok` at n_pos there with its logits to r->out. */
static int exchange_cache(struct run *r, const int32_t *const *tab, int64_t n_pos,
                          int32_t tok, const char *kv_path)
{
    struct backend_seq a = {.table = tab[0], .slot = 0}, b = {.table = tab[1], .slot = 1};
    const struct kv_store *ex;
    const int32_t *et;
    int64_t slot, nb = kv_blocks_for(n_pos);
    struct kv_store *copy = NULL;
    int32_t ident[MAX_IDS / KV_BLOCK + 2];
    IG_ASSERT(nb <= (int64_t)(sizeof ident / sizeof *ident));
    int st = backend_kv_export(r->be, &a, n_pos, &ex, &et, &slot);
    if (st == IG_OK) /* the export is the backend's staging: import a copy */
        st = kv_store_create(ex->memory, nb, 0, NULL, &copy);
    if (st != IG_OK)
        return st;
    kv_identity_table(ident, nb);
    kv_copy_seq(copy, ident, 0, ex, et, slot, n_pos);
    FILE *f = fopen(kv_path, "wb");
    if (!f)
        st = ig_error(IG_E_IO, "cannot open %s", kv_path);
    const struct kv_memory *mem = copy->memory;
    for (int64_t l = 0; l < mem->n_layer && st == IG_OK; l++) {
        if (mem->layers[l].kind == KV_SHARED)
            continue;
        struct kv_layout L = kv_store_layout(copy, l);
        size_t kb = kv_dtype_row_bytes(L.dtype, nb * L.block_stride);
        size_t vb = kv_dtype_row_bytes(L.dtype_v, nb * L.block_stride);
        if (fwrite(L.k, 1, kb, f) != kb || fwrite(L.v, 1, vb, f) != vb)
            st = ig_error(IG_E_IO, "short write of %s", kv_path);
    }
    if (f && fclose(f) && st == IG_OK)
        st = ig_error(IG_E_IO, "cannot write %s", kv_path);
    if (st == IG_OK)
        st = backend_kv_import(r->be, &b, copy, n_pos);
    if (st == IG_OK) {
        const int32_t *t[1] = {&tok};
        int64_t one[1] = {1}, pos[1] = {n_pos};
        st = step(r, 1, t, one, pos, tab + 1, (const int[1]){1}, NULL);
    }
    kv_store_free(copy);
    return st;
}

static int dump(const char *path, const char *out_path, bool alone, const char *label,
                int64_t chunk, int64_t n_greedy, const char *ids_arg)
{
    static int32_t a[MAX_IDS], b_ids[MAX_IDS];
    int64_t na = parse_ids(ids_arg, a);
    if (na < 1 || chunk < 1)
        return ig_error(IG_E_USAGE, "bad token id list or chunk");
    int64_t nb = na < chunk ? na : chunk;
    for (int64_t i = 0; i < nb; i++)
        b_ids[i] = a[na - 1 - i];
    struct model *m = NULL;
    int st = model_load(path, &m);
    if (st != IG_OK)
        return st;
    int64_t n_ctx = na + n_greedy + 2, blocks = kv_blocks_for(n_ctx);
    int32_t *tables = malloc((size_t)(2 * blocks) * sizeof *tables);
    struct run r = {.nv = m->hp.n_vocab};
    r.logits = malloc((size_t)(2 * r.nv) * sizeof *r.logits);
    if (!tables || !r.logits) {
        st = ig_error(IG_E_NOMEM, "out of memory");
        goto done;
    }
    kv_identity_table(tables, 2 * blocks); /* A: blocks 0.., B: blocks `blocks`.. */
    struct backend_opts bo = {.device = {.kind = BACKEND_CUDA}, .n_ctx = n_ctx,
                              .max_rows = chunk, .n_slots = 2, .n_blocks = 2 * blocks,
                              .kv_dtype = cache, .kv_dtype_v = cache,
                              .gpu_weights = weights};
    st = backend_tp_wanted() && !alone ? backend_create(m, &bo, &r.be)
                                       : gpu_backend_create_emu(m, &bo, &r.be);
    if (st != IG_OK)
        goto done;
    if (!(r.out = fopen(out_path, "wb"))) {
        st = ig_error(IG_E_IO, "cannot open %s", out_path);
        goto done;
    }
    const int32_t *tab[2] = {tables, tables + blocks};
    for (int64_t p = 0; p < na && st == IG_OK; p += chunk) { /* A in chunks */
        const int32_t *t[1] = {a + p};
        int64_t n[1] = {na - p < chunk ? na - p : chunk}, pos[1] = {p};
        st = step(&r, 1, t, n, pos, tab, (const int[1]){0}, NULL);
        if (st == IG_OK && p + chunk < na) /* only the last chunk's logits are kept */
            st = fseek(r.out, -(long)(r.nv * 4), SEEK_CUR) ? ig_error(IG_E_IO, "seek") : IG_OK;
    }
    int32_t next[2] = {argmax(r.logits, r.nv), 0};
    const int32_t *tb[1] = {b_ids};
    int64_t nbs[1] = {nb}, zero[1] = {0};
    if (st == IG_OK)
        st = step(&r, 1, tb, nbs, zero, tab + 1, (const int[1]){1}, NULL);
    next[1] = argmax(r.logits, r.nv);
    printf("greedy %s:", label);
    int64_t pos[2] = {na, nb}, ones[2] = {1, 1};
    for (int64_t i = 0; i <= n_greedy && st == IG_OK; i++) {
        const int32_t *t[2] = {&next[0], &next[1]};
        bool last = i == n_greedy;
        int32_t g[2];
        printf(" %d %d", next[0], next[1]);
        st = step(&r, 2, t, ones, pos, tab, (const int[2]){0, 1}, last ? g : NULL);
        if (st == IG_OK && last)
            printf(" %d %d", g[0], g[1]);
        next[0] = argmax(r.logits, r.nv);
        next[1] = argmax(r.logits + r.nv, r.nv);
        pos[0]++, pos[1]++;
    }
    printf("\n");
    if (st == IG_OK && exchange) {
        char kv_path[4200];
        snprintf(kv_path, sizeof kv_path, "%.*skv", (int)(strlen(out_path) - 3), out_path);
        st = exchange_cache(&r, tab, pos[0], next[0], kv_path);
    }
done:
    if (r.out && fclose(r.out) && st == IG_OK)
        st = ig_error(IG_E_IO, "cannot write %s", out_path);
    backend_free(r.be);
    free(r.logits);
    free(tables);
    model_free(m);
    return st;
}

#define MAX_MODELS 4

/* Each model: alone first where asked, then on the job's ranks. */
static int dump_all(const char *const *models, int n_models, const char *prefix, bool alone,
                    int64_t chunk, int64_t n_greedy, const char *ids)
{
    int st = IG_OK;
    for (int i = 0; i < n_models && st == IG_OK; i++) {
        char out[4200], label[32];
        for (int one = alone ? 1 : 0; one >= 0 && st == IG_OK; one--) {
            snprintf(out, sizeof out, "%s%d%s.f32", prefix, i, one ? ".one" : "");
            snprintf(label, sizeof label, "%d%s", i, one ? " one" : "");
            st = dump(models[i], out, one, label, chunk, n_greedy, ids);
        }
    }
    return st;
}

int main(int argc, char **argv)
{
    int st = ig_coll_start(&argc, &argv);
    if (st != IG_OK)
        return st;
    backend_set_cuda(&gpu_entry_emu);
    const char *models[MAX_MODELS], *prefix = NULL;
    int n_models = 0;
    bool alone = false;
    int64_t chunk = 8, n_greedy = 3;
    int c;
    while ((c = getopt(argc, argv, "m:o:c:g:sk:xw:")) != -1) {
        switch (c) {
        case 'm':
            if (n_models < MAX_MODELS)
                models[n_models++] = optarg;
            break;
        case 'o': prefix = optarg; break;
        case 'c': chunk = atoll(optarg); break;
        case 'g': n_greedy = atoll(optarg); break;
        case 's': alone = true; break;
        case 'k': st = kv_dtype_parse("-k", optarg, &cache); break;
        case 'x': exchange = true; break;
        case 'w':
            if (backend_parse_gpu_weights(optarg, &weights) != IG_OK)
                st = IG_E_USAGE;
            break;
        default: st = IG_E_USAGE;
        }
    }
    if (st == IG_OK && (!n_models || !prefix || optind != argc - 1))
        st = ig_error(IG_E_USAGE, "usage: tp_gpu_dump_emu -o PREFIX [-s] [-c CHUNK] [-g N] "
                      "[-k TYPE [-x]] [-w f16] -m MODEL [-m MODEL...] PROMPT_IDS");
    if (ig_coll_rank() != 0)
        st = backend_tp_follow(); /* whatever rank 0 makes of its arguments */
    else if (st == IG_OK)
        st = dump_all(models, n_models, prefix, alone, chunk, n_greedy, argv[optind]);
    backend_tp_end();
    ig_coll_finish();
    return st;
}
