/* tests/kvcache/test_kvmem.c: memory per group of layers (kvcache/kvmem.c)
 * on synthetic layouts with every kind at once: full-attention layers,
 * sliding-window layers of two windows, layers sharing another's KV (a full
 * one's and a windowed one's) and recurrent layers, with KV heads, head dims
 * and state sizes that differ from layer to layer. Checks:
 *   - the groups (kind, window, layers) and their bytes per block and per
 *     sequence against the formula computed here from the layer list, at
 *     f32, f16, q8_0 and q4_0 (K and V of one type and mixed, by hand from
 *     ggml's block sizes), and a store's mapping of exactly kv_memory_bytes;
 *   - a shared layer's layout resolving to its source's (the same arrays
 *     and strides), every other layer's arrays disjoint inside the mapping;
 *   - admission: a pool sized for exactly N sequences (by blocks, by state
 *     slots, and from a byte budget through kv_memory_blocks_in) admits N
 *     and refuses N + 1, the state slot coming back at release; no prefix
 *     sharing where a layer is recurrent;
 *   - a save/load round trip of one sequence (paged rows through scattered
 *     blocks, the recurrent state of its slot, nothing for shared layers):
 *     the file's size by the format's table, every byte read back into a
 *     fresh store, and kv_copy_seq into another slot and table; quantized
 *     and mixed K/V types stored as their blocks, the header's type word;
 *   - a recurrent layer's checkpoint (kv_store_ckpt), one for the pool:
 *     counted once (not in a sequence's bytes; in kv_memory_bytes and the
 *     blocks a budget holds only where there are slots), stored after every
 *     slot's state, cleared by kv_copy_seq into the slot its header names
 *     only, gone from kv_memory_without_ckpt's copy, absent where a layer
 *     has none (bytes not whole KV_STATE_ALIGNs: refused below);
 *   - layouts that make no sense refused in one line (a quantized type
 *     with a head dim that is not whole blocks); kv_memory_of on a
 *     model with windowed layers; a version 1 file refused for layers that
 *     are not all paged alike.
 * Label cpu (no model file). */
#include "core/checksum.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rand_u32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* ---- the layout under test ------------------------------------------------------- */

#define N_LAYER 9
#define N_VOCAB 50

/* kind, KV heads, head dim, window, source, state bytes, checkpoint bytes */
static const struct kv_layer_mem layout[N_LAYER] = {
    {KV_FULL, 2, 32, 0, -1, 0, 0, 0},
    {KV_WINDOW, 1, 32, 128, -1, 0, 0, 0},
    {KV_RECURRENT, 0, 0, 0, -1, 1008, 0, 0},
    {KV_FULL, 4, 32, 0, -1, 0, 0, 0},
    {KV_SHARED, 0, 0, 0, 0, 0, 0, 0},    /* reads layer 0's K/V */
    {KV_WINDOW, 2, 32, 128, -1, 0, 0, 0},
    {KV_RECURRENT, 0, 0, 0, -1, 336, 0, 0},
    {KV_WINDOW, 1, 64, 32, -1, 0, 0, 0}, /* another window: a group of its own */
    {KV_SHARED, 0, 0, 0, 1, 0, 0, 0},    /* reads layer 1's */
};

/* The groups kv_memory_build must make, in order of their first layer. */
static const struct {
    enum kv_kind kind;
    int64_t window;
    int64_t layers[N_LAYER];
    int n;
} want_groups[] = {
    {KV_FULL, 0, {0, 3}, 2},
    {KV_WINDOW, 128, {1, 5}, 2},
    {KV_RECURRENT, 0, {2, 6}, 2},
    {KV_SHARED, 0, {4, 8}, 2},
    {KV_WINDOW, 32, {7}, 1},
};
#define N_GROUPS 5

/* The layer whose K/V layer l reads (itself unless shared). */
static int64_t kv_source(int64_t l)
{
    return layout[l].kind == KV_SHARED ? layout[l].source : l;
}

/* Bytes of n values of a type, by hand: 4 and 2 an element; ggml's q8_0
 * and q4_0 blocks of 32, an f16 scale and 32 bytes or 16. */
static size_t type_bytes(enum kv_dtype dt, int64_t n)
{
    size_t per_block[] = {[KV_F32] = 128, [KV_F16] = 64, [KV_Q8_0] = 34, [KV_Q4_0] = 18};
    return (size_t)n / 32 * per_block[dt];
}

/* Bytes of one block of K (of type dk) and V (dv) of layer l, by hand:
 * shared and recurrent layers have none of their own. */
static size_t layer_block_bytes(int64_t l, enum kv_dtype dk, enum kv_dtype dv)
{
    const struct kv_layer_mem *L = &layout[l];
    if (L->kind != KV_FULL && L->kind != KV_WINDOW)
        return 0;
    int64_t n = L->n_head_kv * KV_BLOCK * L->head_dim;
    return type_bytes(dk, n) + type_bytes(dv, n);
}

static struct kv_memory *build2(enum kv_dtype dk, enum kv_dtype dv)
{
    struct kv_memory *mem = NULL;
    CHECK(kv_memory_build(layout, N_LAYER, dk, dv, &mem) == IG_OK && mem);
    return mem;
}

static struct kv_memory *build(enum kv_dtype dt)
{
    return build2(dt, dt);
}

/* ---- groups and bytes ------------------------------------------------------------ */

static void check_groups(enum kv_dtype dt, enum kv_dtype dv)
{
    size_t block = 0, state = 0;
    struct kv_memory *mem = build2(dt, dv);
    if (!mem)
        return;
    CHECKF(mem->n_groups == N_GROUPS, "%lld groups, want %d", (long long)mem->n_groups,
           N_GROUPS);
    for (int g = 0; g < N_GROUPS && g < mem->n_groups; g++) {
        const struct kv_group *G = &mem->groups[g];
        size_t gb = 0, gs = 0;
        for (int i = 0; i < want_groups[g].n; i++) {
            int64_t l = want_groups[g].layers[i];
            CHECKF(mem->layers[l].group == g, "layer %lld in group %lld, want %d", (long long)l,
                   (long long)mem->layers[l].group, g);
            gb += layer_block_bytes(l, dt, dv);
            gs += layout[l].kind == KV_RECURRENT ? layout[l].state_bytes : 0;
        }
        CHECKF(G->kind == want_groups[g].kind && G->window == want_groups[g].window &&
                   G->n_layers == want_groups[g].n,
               "group %d: %s window %lld, %lld layers", g, kv_kind_name(G->kind),
               (long long)G->window, (long long)G->n_layers);
        CHECKF(G->block_bytes == gb && G->state_bytes == gs,
               "group %d: %zu bytes a block, %zu a sequence; want %zu and %zu", g,
               G->block_bytes, G->state_bytes, gb, gs);
        block += gb;
        state += gs;
    }
    /* 64 positions x (2x32 + 1x32 + 4x32 + 2x32 + 1x64) = 352 values of K and
     * of V: 4 or 2 bytes each, or 352 / 32 blocks of 34 (q8_0) or 18 (q4_0)
     * bytes; states of 1008 + 336 bytes */
    size_t want[][4] = {{2 * 64 * 352 * 4, 0, 0, 0},
                        {0, 2 * 64 * 352 * 2, 64 * 11 * (64 + 34), 0},
                        {0, 0, 2 * 64 * 11 * 34, 64 * 11 * (34 + 18)},
                        {0, 0, 0, 2 * 64 * 11 * 18}};
    size_t t0 = dt < dv ? dt : dv, t1 = dt < dv ? dv : dt;
    if (want[t0][t1])
        CHECKF(block == want[t0][t1], "K %s V %s: %zu bytes a block, want %zu",
               kv_dtype_name(dt), kv_dtype_name(dv), block, want[t0][t1]);
    CHECK(state == 1344);
    CHECKF(mem->block_bytes == block && mem->state_bytes == state,
           "memory: %zu bytes a block, %zu a sequence; want %zu and %zu", mem->block_bytes,
           mem->state_bytes, block, state);
    CHECK(kv_memory_bytes(mem, 7, 3) == 7.0 * (double)block + 3.0 * (double)state);
    CHECK(kv_memory_states_for(mem, 5) == 5);
    /* a shared layer reads its source's shape */
    CHECK(mem->layers[4].n_head_kv == 2 && mem->layers[4].head_dim == 32 &&
          mem->layers[8].n_head_kv == 1 && mem->layers[8].head_dim == 32);

    /* a store: the mapping is the formula's bytes; a shared layer's layout is
     * its source's; the other layers' arrays are disjoint and inside it */
    struct kv_store *st = NULL;
    int64_t nb = 5, ns = 3;
    CHECK(kv_store_create(mem, nb, ns, NULL, &st) == IG_OK);
    if (st) {
        CHECKF((double)st->bytes == kv_memory_bytes(mem, nb, ns), "store maps %zu bytes",
               st->bytes);
        char *lo[2 * N_LAYER], *hi[2 * N_LAYER];
        int n = 0;
        for (int64_t l = 0; l < N_LAYER; l++) {
            if (layout[l].kind == KV_RECURRENT) {
                char *a = kv_store_state(st, l, 0), *b = kv_store_state(st, l, ns - 1);
                CHECK(b - a == (ptrdiff_t)((ns - 1) * (int64_t)layout[l].state_bytes));
                lo[n] = a, hi[n++] = b + layout[l].state_bytes;
                continue;
            }
            struct kv_layout L = kv_store_layout(st, l), S = kv_store_layout(st, kv_source(l));
            const struct kv_layer_mem *src = &layout[kv_source(l)];
            CHECKF(L.k == S.k && L.v == S.v && L.block_stride == S.block_stride &&
                       L.head_stride == KV_BLOCK * src->head_dim && L.head_dim == src->head_dim &&
                       L.block_stride == src->n_head_kv * KV_BLOCK * src->head_dim,
                   "layer %lld's layout is not layer %lld's", (long long)l,
                   (long long)kv_source(l));
            if (layout[l].kind == KV_SHARED)
                continue;
            lo[n] = L.k, hi[n++] = (char *)L.k + type_bytes(dt, nb * L.block_stride);
            lo[n] = L.v, hi[n++] = (char *)L.v + type_bytes(dv, nb * L.block_stride);
        }
        int overlaps = 0;
        for (int i = 0; i < n; i++) {
            overlaps += lo[i] < st->base || hi[i] > st->base + st->bytes;
            for (int j = 0; j < i; j++)
                overlaps += lo[i] < hi[j] && lo[j] < hi[i];
        }
        CHECKF(overlaps == 0, "%d arrays overlap or leave the mapping", overlaps);
        kv_store_free(st);
    }
    kv_memory_free(mem);
}

/* ---- admission ------------------------------------------------------------------- */

/* Admits sequences of max_pos positions into `p` until one is refused;
 * returns how many were admitted (at most `cap`), releasing them all. */
static int admit_until_full(struct kv_pool *p, int64_t max_pos, int cap)
{
    struct kv_seq s[8];
    int32_t tok[4 * KV_BLOCK] = {0};
    int n = 0;
    while (n < cap) {
        CHECK(kv_seq_init(&s[n], max_pos) == IG_OK);
        bool can = kv_pool_can_admit(p, tok, 0, max_pos);
        int st = kv_pool_admit(p, &s[n], tok, 0, max_pos);
        CHECK(can == (st == IG_OK));
        if (st != IG_OK) {
            CHECK(st == IG_E_NOMEM && s[n].n_blocks == 0 && !s[n].has_state);
            kv_seq_destroy(&s[n]);
            break;
        }
        CHECK(s[n].has_state == (kv_pool_n_states(p) > 0));
        kv_pool_grow(p, &s[n], max_pos);
        n++;
    }
    if (n > 0 && n < cap) { /* one released gives its blocks and state to the next */
        kv_pool_release(p, &s[0]);
        CHECK(kv_pool_admit(p, &s[0], tok, 0, max_pos) == IG_OK);
    }
    for (int i = 0; i < n; i++) {
        kv_pool_release(p, &s[i]);
        kv_seq_destroy(&s[i]);
    }
    CHECK(kv_pool_states_used(p) == 0 && kv_pool_used(p) == 0);
    return n;
}

static void check_admission(void)
{
    const int N = 3;
    int64_t max_pos = 3 * KV_BLOCK + 10, per_seq = kv_blocks_for(max_pos); /* 4 blocks */
    struct kv_memory *mem = build(KV_F16);
    if (!mem)
        return;
    struct {
        int64_t n_blocks, n_states;
        const char *what;
    } cases[] = {
        {N * per_seq, N, "blocks and states for N"},
        {(N + 1) * per_seq, N, "blocks for N + 1, states for N"},
        {N * per_seq, N + 1, "blocks for N, states for N + 1"},
        {N * per_seq + per_seq - 1, N + 5, "a block short of N + 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct kv_pool *p = NULL;
        CHECK(kv_pool_create(cases[i].n_blocks, cases[i].n_states, true, &p) == IG_OK);
        int got = admit_until_full(p, max_pos, 8);
        CHECKF(got == N, "%s: admitted %d, want %d", cases[i].what, got, N);
        CHECK(kv_pool_states_peak(p) == N);
        kv_pool_free(p);
    }
    /* without recurrent layers, sequences need no state */
    struct kv_pool *p = NULL;
    CHECK(kv_pool_create(N * per_seq, 0, true, &p) == IG_OK);
    CHECK(admit_until_full(p, max_pos, 8) == N && kv_pool_states_peak(p) == 0);
    kv_pool_free(p);

    /* a byte budget that holds exactly N sequences, states counted: the
     * blocks it leaves beside N states are N sequences' */
    double budget = (double)N * ((double)per_seq * (double)mem->block_bytes +
                                 (double)mem->state_bytes);
    CHECK(kv_memory_blocks_in(mem, budget, N) == N * per_seq);
    CHECK(kv_memory_blocks_in(mem, budget - 1, N) == N * per_seq - 1);
    CHECK(kv_memory_blocks_in(mem, (double)N * (double)mem->state_bytes - 1, N) == 0);
    CHECK(kv_pool_create(kv_memory_blocks_in(mem, budget, N), kv_memory_states_for(mem, N),
                         true, &p) == IG_OK);
    CHECK(admit_until_full(p, max_pos, 8) == N);
    kv_pool_free(p);

    /* no prefix sharing where a layer is recurrent: the state of a shared
     * prefix is not in its blocks */
    int32_t tok[2 * KV_BLOCK];
    for (int i = 0; i < 2 * KV_BLOCK; i++)
        tok[i] = i;
    CHECK(kv_pool_create(8, 2, true, &p) == IG_OK);
    struct kv_seq s;
    CHECK(kv_seq_init(&s, 2 * KV_BLOCK) == IG_OK);
    CHECK(kv_pool_admit(p, &s, tok, 0, 2 * KV_BLOCK) == IG_OK);
    kv_pool_grow(p, &s, 2 * KV_BLOCK);
    s.n_pos = 2 * KV_BLOCK;
    kv_pool_register(p, &s, tok);
    CHECK(kv_pool_match(p, tok, 2 * KV_BLOCK, 2) == 0);
    kv_pool_release(p, &s);
    kv_seq_destroy(&s);
    kv_pool_free(p);
    kv_memory_free(mem);
}

/* ---- save and load --------------------------------------------------------------- */

/* Writes random rows to positions [0, n) of every paged layer through
 * `table`, and random bytes to every state slot of the recurrent ones. */
static void fill(struct kv_store *st, const int32_t *table, int64_t n)
{
    const struct kv_memory *mem = st->memory;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        if (L->kind == KV_RECURRENT) {
            for (int64_t s = 0; s < st->n_states; s++) {
                unsigned char *b = kv_store_state(st, l, s);
                for (size_t i = 0; i < L->state_bytes; i++)
                    b[i] = (unsigned char)rand_u32();
            }
            continue;
        }
        if (L->kind == KV_SHARED)
            continue;
        int64_t kv_dim = L->n_head_kv * L->head_dim;
        float *k = malloc((size_t)(n * kv_dim) * sizeof *k), *v = malloc((size_t)(n * kv_dim) * sizeof *v);
        for (int64_t i = 0; i < n * kv_dim; i++)
            k[i] = (float)(int32_t)rand_u32() / 65536.0f, v[i] = (float)(rand_u32() % 1000) - 500.0f;
        struct kv_layout Lo = kv_store_layout(st, l);
        kv_write_rows(&Lo, table, L->n_head_kv, 0, n, k, v);
        free(k);
        free(v);
    }
}

/* Mismatching bytes between sequence (a, ta, sa) and (b, tb, sb): every
 * layer's rows of positions [0, n) as that layer reads them (a shared
 * layer: its source's) and every recurrent layer's state. */
static int64_t differences(const struct kv_store *a, const int32_t *ta, int64_t sa,
                           const struct kv_store *b, const int32_t *tb, int64_t sb, int64_t n)
{
    const struct kv_memory *mem = a->memory;
    int64_t bad = 0;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        const struct kv_layer_mem *L = &mem->layers[l];
        if (L->kind == KV_RECURRENT) {
            const unsigned char *x = kv_store_state(a, l, sa), *y = kv_store_state(b, l, sb);
            for (size_t i = 0; i < L->state_bytes; i++)
                bad += x[i] != y[i];
            continue;
        }
        struct kv_layout la = kv_store_layout(a, l), lb = kv_store_layout(b, l);
        size_t row = type_bytes(mem->dtype, L->head_dim), vrow = type_bytes(mem->dtype_v, L->head_dim);
        for (int64_t h = 0; h < L->n_head_kv; h++)
            for (int64_t p = 0; p < n; p++) {
                bad += memcmp(kv_row(&la, la.k, ta, h, p), kv_row(&lb, lb.k, tb, h, p), row) != 0;
                bad += memcmp(kv_row(&la, la.v, ta, h, p), kv_row(&lb, lb.v, tb, h, p), vrow) != 0;
            }
    }
    return bad;
}

static void check_file(enum kv_dtype dt, enum kv_dtype dv, int64_t n_pos)
{
    struct kv_memory *mem = build2(dt, dv);
    if (!mem)
        return;
    int64_t nb = kv_blocks_for(n_pos), n_states = 3, slot = 2;
    struct kv_store *st = NULL, *back = NULL, *third = NULL;
    CHECK(kv_store_create(mem, 2 * nb + 1, n_states, NULL, &st) == IG_OK);
    CHECK(kv_store_create(mem, 2 * nb + 1, n_states, NULL, &third) == IG_OK);
    int32_t table[16], ident[16], other[16];
    for (int64_t b = 0; b < nb; b++)
        table[b] = (int32_t)(2 * nb - 2 * b), ident[b] = (int32_t)b, other[b] = (int32_t)(b + 1);
    fill(st, table, n_pos);
    int32_t tok[4 * KV_BLOCK], tok2[4 * KV_BLOCK];
    float logits[N_VOCAB], logits2[N_VOCAB];
    for (int64_t i = 0; i < n_pos; i++)
        tok[i] = (int32_t)(rand_u32() % N_VOCAB);
    for (int i = 0; i < N_VOCAB; i++)
        logits[i] = (float)i / 7.0f;
    unsigned char id[KV_MODEL_ID_BYTES] = {7, 7, 7};

    char *data = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&data, &len);
    CHECK(f && kv_file_write(f, "mem", st, table, slot, n_pos, id, tok, logits, N_VOCAB) ==
                   IG_OK);
    fclose(f);
    /* the format's table: head, 24 bytes a group, 40 a layer, tokens,
     * logits, each paged layer's rows, each recurrent layer's state, CRC */
    size_t want = 80 + 24 * N_GROUPS + 40 * N_LAYER + 4 * (size_t)n_pos + 4 * N_VOCAB + 4;
    for (int64_t l = 0; l < N_LAYER; l++)
        want += layout[l].kind == KV_RECURRENT
                    ? layout[l].state_bytes
                    : layer_block_bytes(l, dt, dv) / KV_BLOCK * (size_t)n_pos;
    CHECKF(len == want, "a file of %zu bytes, want %zu", len, want);
    uint32_t crc;
    memcpy(&crc, data + len - 4, 4);
    CHECK(crc == ig_crc32c(0, data, len - 4));

    f = fmemopen(data, len, "rb");
    struct kv_file_reader r;
    CHECK(kv_file_read_header(&r, f, "mem", mem, N_VOCAB, id) == IG_OK);
    CHECK(r.hdr.version == KV_FILE_VERSION && r.hdr.n_groups == N_GROUPS &&
          r.hdr.n_tokens == n_pos && r.hdr.dtype == dt && r.hdr.dtype_v == dv);
    /* the header's type word: K's type, V's + 1 above it where they differ */
    uint32_t word;
    memcpy(&word, data + 12, 4);
    CHECKF(word == (uint32_t)dt + (dv == dt ? 0u : ((uint32_t)dv + 1) << 16),
           "K %s V %s: type word %#x", kv_dtype_name(dt), kv_dtype_name(dv), word);
    CHECK(kv_file_read_body(&r, &back, tok2, logits2) == IG_OK && back);
    fclose(f);
    if (back) {
        CHECK(back->n_blocks == nb && back->n_states == 1 && back->memory->dtype == dt &&
              back->memory->dtype_v == dv);
        int64_t bad = differences(st, table, slot, back, ident, 0, n_pos);
        CHECKF(bad == 0, "%lld rows or state bytes differ after a round trip", (long long)bad);
        CHECK(!memcmp(tok, tok2, (size_t)n_pos * sizeof *tok) &&
              !memcmp(logits, logits2, sizeof logits));
        /* the state of another slot is not what was saved */
        CHECK(differences(st, table, 0, back, ident, 0, n_pos) > 0);
        /* into another store's slot 1 through another table, as an import */
        kv_copy_seq(third, other, 1, back, ident, 0, n_pos);
        bad = differences(st, table, slot, third, other, 1, n_pos);
        CHECKF(bad == 0, "%lld rows or state bytes differ after kv_copy_seq", (long long)bad);
    }

    /* the same file for other layers: refused in one line each */
    fprintf(stderr, "(error lines expected below)\n");
    struct kv_layer_mem alt[N_LAYER];
    memcpy(alt, layout, sizeof alt);
    alt[6].state_bytes = 352; /* a recurrent layer's state of another size */
    struct kv_memory *mem2 = NULL;
    CHECK(kv_memory_build(alt, N_LAYER, dt, dv, &mem2) == IG_OK);
    f = fmemopen(data, len, "rb");
    CHECK(kv_file_read_header(&r, f, "mem", mem2, N_VOCAB, id) == IG_E_KVFILE);
    fclose(f);
    kv_memory_free(mem2);
    memcpy(alt, layout, sizeof alt);
    alt[8].source = 0; /* shares another layer */
    CHECK(kv_memory_build(alt, N_LAYER, dt, dv, &mem2) == IG_OK);
    f = fmemopen(data, len, "rb");
    CHECK(kv_file_read_header(&r, f, "mem", mem2, N_VOCAB, id) == IG_E_KVFILE);
    fclose(f);
    kv_memory_free(mem2);
    /* a cut anywhere in the states or rows */
    for (size_t cut = len - 1; cut > len - 1400; cut -= 97) {
        struct kv_store *cutback = NULL;
        f = fmemopen(data, cut, "rb");
        CHECK(kv_file_read_header(&r, f, "mem", mem, N_VOCAB, id) == IG_OK);
        CHECK(kv_file_read_body(&r, &cutback, tok2, logits2) == IG_E_KVFILE && !cutback);
        fclose(f);
    }
    /* a version 1 head over these layers: not every layer paged alike */
    unsigned char v1[88 + 8];
    memcpy(v1, data, 48);
    v1[8] = 1;
    int64_t fields[] = {N_LAYER, 2, 16, n_pos, N_VOCAB, 0};
    memcpy(v1 + 48, fields, sizeof fields);
    f = fmemopen(v1, sizeof v1, "rb");
    CHECK(kv_file_read_header(&r, f, "mem", mem, N_VOCAB, id) == IG_E_KVFILE);
    fclose(f);

    free(data);
    kv_store_free(third);
    kv_store_free(back);
    kv_store_free(st);
    kv_memory_free(mem);
}

/* ---- what is refused, and a model's memory ------------------------------------------ */

static void check_refusals(void)
{
    struct kv_memory *mem = NULL;
    struct kv_layer_mem alt[N_LAYER];
    /* source recurrent, source shared, itself, out of range; a window of 0 on
     * a windowed layer, a window on a full one; an empty state, one that would
     * leave the next slot unaligned (UBSan caught f16 loads at odd addresses
     * when the store took 333 bytes), or a checkpoint that would; no KV heads */
    struct { int64_t layer; struct kv_layer_mem l; } bad[] = {
        {4, {KV_SHARED, 0, 0, 0, 2, 0, 0, 0}},
        {4, {KV_SHARED, 0, 0, 0, 8, 0, 0, 0}},
        {4, {KV_SHARED, 0, 0, 0, 4, 0, 0, 0}},
        {4, {KV_SHARED, 0, 0, 0, N_LAYER, 0, 0, 0}},
        {1, {KV_WINDOW, 1, 32, 0, -1, 0, 0, 0}},
        {0, {KV_FULL, 2, 16, 64, -1, 0, 0, 0}},
        {2, {KV_RECURRENT, 0, 0, 0, -1, 0, 0, 0}},
        {6, {KV_RECURRENT, 0, 0, 0, -1, 333, 0, 0}},
        {6, {KV_RECURRENT, 0, 0, 0, -1, 336, 24, 0}},
        {3, {KV_FULL, 0, 8, 0, -1, 0, 0, 0}},
    };
    fprintf(stderr, "(%zu error lines expected)\n", sizeof bad / sizeof bad[0]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(alt, layout, sizeof alt);
        alt[bad[i].layer] = bad[i].l;
        CHECKF(kv_memory_build(alt, N_LAYER, KV_F32, KV_F32, &mem) == IG_E_INTERNAL && !mem,
               "bad layout %zu was taken", i);
    }
}

static void check_model_memory(void)
{
    /* a Gemma 3-like model: every sixth layer global, the others a window of 512 */
    struct model_layer layers[12];
    memset(layers, 0, sizeof layers);
    for (int l = 0; l < 12; l++) {
        layers[l].window = l % 6 == 5 ? 0 : 512;
        layers[l].n_head_kv = 2, layers[l].head_dim = 64; /* kv_memory_of reads the layer's */
    }
    struct model m;
    memset(&m, 0, sizeof m);
    m.hp.n_layer = 12, m.hp.n_head_kv = 2, m.hp.head_dim = 64;
    m.layers = layers;
    struct kv_memory *mem = NULL;
    CHECK(kv_memory_of(&m, KV_F16, KV_F16, &mem) == IG_OK && mem);
    if (!mem)
        return;
    CHECK(mem->n_groups == 2 && mem->groups[0].kind == KV_WINDOW &&
          mem->groups[0].window == 512 && mem->groups[0].n_layers == 10 &&
          mem->groups[1].kind == KV_FULL && mem->groups[1].n_layers == 2);
    for (int l = 0; l < 12; l++)
        CHECK(mem->layers[l].group == (l % 6 == 5) && mem->layers[l].n_head_kv == 2 &&
              mem->layers[l].head_dim == 64);
    /* today's layout: every layer's K and V a block, as before groups */
    CHECK(mem->block_bytes == 12 * 2 * (size_t)(2 * KV_BLOCK * 64) * 2 && !mem->state_bytes);
    CHECK(kv_memory_states_for(mem, 4) == 0);
    kv_memory_free(mem);
}

/* The pool's one checkpoint of a recurrent layer after its states: layer 1
 * keeps 160 bytes once beside its 336 of state a sequence, layer 2 none. */
static void check_ckpt(void)
{
    const struct kv_layer_mem ls[3] = {{KV_FULL, 1, 32, 0, -1, 0, 0, 0},
                                       {KV_RECURRENT, 0, 0, 0, -1, 336, 160, 0},
                                       {KV_RECURRENT, 0, 0, 0, -1, 48, 0, 0}};
    struct kv_memory *mem = NULL, *bare = NULL;
    struct kv_store *a = NULL, *b = NULL;
    CHECK(kv_memory_build(ls, 3, KV_F32, KV_F32, &mem) == IG_OK && mem);
    if (!mem)
        return;
    /* a slot costs its states; the checkpoint is counted once, where there
     * are slots at all */
    CHECK(mem->state_bytes == 336 + 48 && mem->groups[1].state_bytes == 336 + 48 &&
          mem->ckpt_bytes == 160 && mem->groups[1].ckpt_bytes == 160);
    CHECK(kv_memory_bytes(mem, 2, 3) == 2.0 * (double)mem->block_bytes + 3 * 384.0 + 160 &&
          kv_memory_bytes(mem, 2, 0) == 2.0 * (double)mem->block_bytes);
    CHECK(kv_memory_blocks_in(mem, 3 * 384.0 + 160 + 2.0 * (double)mem->block_bytes, 3) == 2 &&
          kv_memory_blocks_in(mem, 3 * 384.0 + 159 + 2.0 * (double)mem->block_bytes, 3) == 1);
    int64_t ns = 3;
    CHECK(kv_store_create(mem, 2, ns, NULL, &a) == IG_OK &&
          kv_store_create(mem, 2, ns, NULL, &b) == IG_OK);
    if (a && b) {
        CHECK((double)a->bytes == kv_memory_bytes(mem, 2, ns));
        char *s0 = kv_store_state(a, 1, 0), *c0 = kv_store_ckpt(a, 1);
        CHECK(c0 == s0 + ns * 336);
        CHECK(c0 + 160 == (char *)kv_store_state(a, 2, 0) && !kv_store_ckpt(a, 2));
        /* a state copied into the holder's slot gives the checkpoint back
         * (its header zeroed, its rows kept); into another slot it stays */
        int32_t table[1] = {0};
        memset(kv_store_state(a, 1, 0), 7, 336);
        unsigned char *ck = kv_store_ckpt(b, 1);
        memset(ck, 9, 160);
        *(struct kv_ckpt_head *)(void *)ck = (struct kv_ckpt_head){.pos = 64, .n = 5, .slot = 2};
        kv_copy_seq(b, table, 1, a, table, 0, 1);
        CHECK(!memcmp(kv_store_state(b, 1, 1), kv_store_state(a, 1, 0), 336));
        CHECK(((struct kv_ckpt_head *)(void *)ck)->n == 5 && ck[KV_STATE_ALIGN] == 9);
        kv_copy_seq(b, table, 2, a, table, 0, 1);
        CHECK(ck[0] == 0 && ck[KV_STATE_ALIGN - 1] == 0 && ck[KV_STATE_ALIGN] == 9);
    }
    CHECK(kv_memory_without_ckpt(mem, &bare) == IG_OK && bare);
    if (bare) {
        CHECK(bare->state_bytes == 336 + 48 && bare->ckpt_bytes == 0 &&
              bare->layers[1].ckpt_bytes == 0 &&
              bare->layers[1].state_bytes == 336 && kv_memory_same_layers(bare, mem));
        kv_memory_free(bare);
    }
    kv_store_free(a);
    kv_store_free(b);
    kv_memory_free(mem);
}

/* A quantized type needs rows of whole blocks: a head dim of 48 is refused
 * in one line, for K or for V alone. */
static void check_quant_refusals(void)
{
    struct kv_layer_mem odd[N_LAYER];
    memcpy(odd, layout, sizeof odd);
    odd[3].head_dim = 48;
    struct kv_memory *mem = NULL;
    fprintf(stderr, "(error lines expected below)\n");
    CHECK(kv_memory_build(odd, N_LAYER, KV_Q8_0, KV_F16, &mem) == IG_E_USAGE && !mem);
    CHECK(kv_memory_build(odd, N_LAYER, KV_F16, KV_Q4_0, &mem) == IG_E_USAGE && !mem);
    CHECK(kv_memory_build(odd, N_LAYER, KV_F16, KV_F32, &mem) == IG_OK && mem);
    kv_memory_free(mem);
}

/* The rotation orders by hand: K by the largest power of two dividing the
 * head dim up to KV_ROT_K_MAX (128), V by 64, none for f32/f16 or a head
 * dim that is not a multiple of 64. */
static void check_rotation(void)
{
    CHECKF(kv_rotation(KV_Q4_0, 64, false) == 64 && kv_rotation(KV_Q4_0, 128, false) == 128 &&
              kv_rotation(KV_Q4_0, 256, false) == 128 && kv_rotation(KV_Q8_0, 512, false) == 128 &&
              kv_rotation(KV_Q8_0, 192, false) == 64,
          "K's rotation orders");
    CHECKF(kv_rotation(KV_Q4_0, 256, true) == 64 && kv_rotation(KV_F16, 256, false) == 0 &&
              kv_rotation(KV_Q4_0, 96, false) == 0,
          "V's rotation order, none for f16 or a head dim of 96");
}

/* A version 2 file (K rotated by the whole power of two dividing the head
 * dim) reads its header where that is version 3's rotation (head dim 128)
 * and is refused in one line where it is not (256, a quantized K); a V
 * alone quantized was never rotated otherwise. */
static void check_v2_rotation(void)
{
    static const struct {
        int64_t hd;
        enum kv_dtype dk, dv;
        int want;
    } cases[] = {{128, KV_Q4_0, KV_Q4_0, IG_OK}, {256, KV_Q4_0, KV_F16, IG_E_KVFILE},
                 {256, KV_Q8_0, KV_Q8_0, IG_E_KVFILE}, {256, KV_F16, KV_Q4_0, IG_OK}};
    fprintf(stderr, "(error lines expected below)\n");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct kv_layer_mem one[1] = {{KV_FULL, 1, cases[c].hd, 0, -1, 0, 0, 0}};
        struct kv_memory *mem = NULL;
        struct kv_store *st = NULL;
        CHECK(kv_memory_build(one, 1, cases[c].dk, cases[c].dv, &mem) == IG_OK);
        CHECK(mem && kv_store_create(mem, 1, 1, NULL, &st) == IG_OK);
        if (!st) {
            kv_memory_free(mem);
            continue;
        }
        int32_t table[1] = {0}, tok[3] = {1, 2, 3};
        float logits[N_VOCAB] = {0};
        unsigned char id[KV_MODEL_ID_BYTES] = {7};
        char *data = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&data, &len);
        CHECK(f && kv_file_write(f, "mem", st, table, 0, 3, id, tok, logits, N_VOCAB) == IG_OK);
        fclose(f);
        data[8] = 2; /* the version */
        f = fmemopen(data, len, "rb");
        struct kv_file_reader r;
        int got = kv_file_read_header(&r, f, "mem", mem, N_VOCAB, id);
        CHECKF(got == cases[c].want, "a version 2 file, head dim %lld, K %s V %s: %d, want %d",
               (long long)cases[c].hd, kv_dtype_name(cases[c].dk), kv_dtype_name(cases[c].dv),
               got, cases[c].want);
        fclose(f);
        free(data);
        kv_store_free(st);
        kv_memory_free(mem);
    }
}

int main(void)
{
    check_rotation();
    check_v2_rotation();
    check_groups(KV_F32, KV_F32);
    check_groups(KV_F16, KV_F16);
    check_groups(KV_Q8_0, KV_Q8_0);
    check_groups(KV_Q4_0, KV_Q4_0);
    check_groups(KV_Q8_0, KV_Q4_0);
    check_groups(KV_F16, KV_Q8_0);
    check_admission();
    check_file(KV_F32, KV_F32, 3);
    check_file(KV_F16, KV_F16, 2 * KV_BLOCK + 17);
    check_file(KV_F32, KV_F32, KV_BLOCK);
    check_file(KV_Q8_0, KV_Q8_0, 2 * KV_BLOCK + 17);
    check_file(KV_Q4_0, KV_F16, KV_BLOCK + 5);
    check_file(KV_F32, KV_Q4_0, 3);
    check_quant_refusals();
    check_refusals();
    check_model_memory();
    check_ckpt();
    return test_summary("test_kvmem");
}
