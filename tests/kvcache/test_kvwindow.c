/* tests/kvcache/test_kvwindow.c: the window rule without a model (kvcache.h):
 * the bytes of a memory with a window side and the blocks a --kv-mem holds
 * beside it, by hand; the cap; a pool's window side as a sequence moves on
 * in steps (blocks given back exactly when wholly behind the next row's
 * window, never more held than the cap, every block back after release);
 * a speculative rollback (kv_pool_trim) that needs no block given back; a
 * shared prefix sharing the window blocks its last rows see, and the match
 * cut back where they were handed out anew; a loaded sequence holding the
 * window's blocks only; a store with fewer window blocks, and a sequence
 * copied out of it (kv_copy_seq_windowed: the rows given back as zeros,
 * the others bit for bit) and back. The model-level checks (logits equal to
 * the fp64 reference and to keeping every block) are tests/cpu/
 * test_gemma4.py's and test_greedy_llamacpp.py's (Gemma 3). */
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>

#define WINDOW 100 /* positions a row sees: w_span 99 */

/* Layers: full, window, full, window (2 KV heads of 32, f32). */
static struct kv_memory *memory(void)
{
    struct kv_layer_mem ls[4];
    for (int l = 0; l < 4; l++)
        ls[l] = (struct kv_layer_mem){.kind = l % 2 ? KV_WINDOW : KV_FULL, .n_head_kv = 2,
                                      .head_dim = 32, .window = l % 2 ? WINDOW : 0,
                                      .source = -1};
    struct kv_memory *mem = NULL;
    CHECK(kv_memory_build(ls, 4, KV_F32, KV_F32, &mem) == IG_OK);
    return mem;
}

static void check_bytes(const struct kv_memory *mem)
{
    size_t layer = 2 * 2 * KV_BLOCK * 32 * 4; /* K and V of one block */
    CHECK(mem->block_bytes == 4 * layer && mem->window_bytes == 2 * layer);
    CHECK(mem->window_max == WINDOW);
    CHECK(kv_memory_bytes_windowed(mem, 10, 0, 0) == 10.0 * 4 * layer);
    CHECK(kv_memory_bytes_windowed(mem, 10, 3, 0) == 10.0 * 2 * layer + 3.0 * 2 * layer);
    /* 99 positions back and 16 rows: 115 positions, over at most 3 blocks */
    CHECK(kv_memory_window_cap(mem, 4096, 16) == 3);
    CHECK(kv_memory_window_cap(mem, 100, 512) == 2); /* never more than the context's */
    CHECK(kv_memory_window_blocks(mem, 4, 4096, 16) == 12);
    /* 40 layer-blocks of bytes: 12 window blocks (24) beside, 16 / 2 full */
    CHECK(kv_memory_blocks_in_windowed(mem, 40.0 * layer, 12, 0) == 8);
    CHECK(kv_memory_blocks_in_windowed(mem, 23.0 * layer, 12, 0) == 0);
}

/* The window blocks s holds (entries at or after w_lo that are >= 0). */
static int64_t held(const struct kv_seq *s)
{
    int64_t n = 0;
    for (int64_t i = 0; i < s->n_blocks; i++) {
        CHECK(i >= s->w_lo || s->wtable[i] < 0);
        n += s->wtable[i] >= 0;
    }
    return n;
}

static void tokens_of(int32_t *t, int64_t n, int32_t seed)
{
    for (int64_t i = 0; i < n; i++)
        t[i] = (int32_t)((i * 7919 + seed * 104729) % 50000);
}

static void check_pool(void)
{
    enum { CAP = 3, N_CTX = 20 * KV_BLOCK };
    struct kv_pool *p;
    CHECK(kv_pool_create_windowed(40, 0, true, 2 * CAP, WINDOW - 1, CAP, &p) == IG_OK);
    int32_t toks[N_CTX];
    tokens_of(toks, N_CTX, 1);
    struct kv_seq a, b, c;
    CHECK(kv_seq_init(&a, N_CTX) == IG_OK && kv_seq_init(&b, N_CTX) == IG_OK &&
          kv_seq_init(&c, N_CTX) == IG_OK);

    /* a: 1000 positions in steps of 16 rows; before each step the window
     * blocks wholly before (pos0 - 99) go back, and no more */
    CHECK(kv_pool_admit(p, &a, toks, 0, 1000) == IG_OK);
    CHECK(kv_pool_window_promised(p) == CAP); /* (its cap, of 2 caps) */
    for (int64_t pos0 = 0; pos0 < 1000; pos0 += 16) {
        int64_t n = 1000 - pos0 < 16 ? 1000 - pos0 : 16;
        kv_pool_grow(p, &a, pos0 + n);
        int64_t first = pos0 > WINDOW - 1 ? (pos0 - (WINDOW - 1)) / KV_BLOCK : 0;
        CHECK(a.w_lo == first && held(&a) == a.n_blocks - first && held(&a) <= CAP);
        CHECK(kv_pool_window_used(p) == held(&a));
        a.n_pos = pos0 + n;
        kv_pool_register(p, &a, toks);
    }
    CHECK(kv_pool_used(p) == 16 && kv_pool_window_peak(p) <= CAP);
    CHECK(kv_pool_window_freed(p) == (1000 - 16 - (WINDOW - 1)) / KV_BLOCK);

    /* a speculative step of 5 rows at 1000, 2 kept: the rollback needs none of
     * the blocks given back, and the blocks past the kept rows come back */
    kv_pool_grow(p, &a, 1005);
    a.n_pos = 1005;
    kv_pool_trim(p, &a, 1002);
    CHECK(a.n_pos == 1002 && a.n_blocks == 16 && held(&a) <= CAP);

    /* b: the same first 640 tokens. The full blocks are shared; the window
     * blocks beside blocks 0..9 were given back by a and handed out anew:
     * the match is cut back to where the window rows beside the last
     * shared blocks still hold (none here: a's free window blocks were
     * taken by a again as it moved on) */
    int64_t m = kv_pool_match(p, toks, 640, 9);
    CHECK(m == 0);
    kv_pool_release(p, &a);
    CHECK(kv_pool_window_used(p) == 0 && kv_pool_used(p) == 0 && kv_pool_window_promised(p) == 0);

    /* c: 200 positions of other tokens in steps of 16, then b shares its
     * first 3 blocks: the window blocks beside blocks 1 and 2 (what a row
     * at 192 sees from 93 on) are c's, held twice; block 0's is not taken */
    int32_t tc[N_CTX];
    tokens_of(tc, N_CTX, 2);
    CHECK(kv_pool_admit(p, &c, tc, 0, 200) == IG_OK);
    for (int64_t pos0 = 0; pos0 < 200; pos0 += 16) {
        kv_pool_grow(p, &c, pos0 + 16 < 200 ? pos0 + 16 : 200);
        c.n_pos = pos0 + 16 < 200 ? pos0 + 16 : 200;
        kv_pool_register(p, &c, tc);
    }
    CHECK(held(&c) == 3 && c.w_lo == 1);
    CHECK(kv_pool_match(p, tc, 400, 6) == 3);
    CHECK(kv_pool_admit(p, &b, tc, 3, 400) == IG_OK);
    CHECK(b.n_pos == 3 * KV_BLOCK && b.w_lo == (192 - 99) / KV_BLOCK && b.wtable[0] < 0);
    CHECK(b.wtable[1] == c.wtable[1] && b.wtable[2] == c.wtable[2]);
    CHECK(kv_pool_window_used(p) == 3); /* c's 3, two of them b's too */
    /* b writes on: past its 3 shared blocks its window blocks are its own */
    kv_pool_grow(p, &b, 3 * KV_BLOCK + 16);
    CHECK(b.wtable[3] >= 0 && b.wtable[3] != c.wtable[3] && kv_pool_window_used(p) == 4);
    kv_pool_release(p, &b);
    kv_pool_release(p, &c);
    CHECK(kv_pool_window_used(p) == 0 && kv_pool_used(p) == 0);

    /* a window side that holds only two sequences' caps: a third waits */
    CHECK(kv_pool_admit(p, &a, toks, 0, 500) == IG_OK);
    CHECK(kv_pool_admit(p, &b, toks, 0, 500) == IG_OK);
    CHECK(!kv_pool_can_admit(p, toks, 0, 500));
    kv_pool_release(p, &b);

    /* a loaded cache of 700 positions: only the window's blocks held */
    kv_pool_release(p, &a);
    CHECK(kv_pool_admit(p, &a, NULL, 0, 800) == IG_OK);
    kv_pool_grow_loaded(p, &a, 700);
    CHECK(a.n_blocks == 11 && a.w_lo == (700 - 99) / KV_BLOCK && held(&a) == 11 - a.w_lo);
    kv_pool_release(p, &a);
    CHECK(kv_pool_window_used(p) == 0);
    kv_seq_destroy(&a);
    kv_seq_destroy(&b);
    kv_seq_destroy(&c);
    kv_pool_free(p);
}

/* A sequence written into a store with a window side, copied out (the
 * given-back rows as zeros) and back into another sequence's blocks. */
static void check_store(const struct kv_memory *mem)
{
    enum { CAP = 3, N = 300 };
    struct kv_pool *p;
    struct kv_store *st, *out, *back;
    CHECK(kv_pool_create_windowed(8, 0, false, 2 * CAP, WINDOW - 1, CAP, &p) == IG_OK);
    CHECK(kv_store_create_windowed(mem, 8, 2 * CAP, 0, NULL, &st) == IG_OK);
    CHECK(st->n_wblocks == 2 * CAP);
    struct kv_seq s;
    CHECK(kv_seq_init(&s, N) == IG_OK && kv_pool_admit(p, &s, NULL, 0, N) == IG_OK);
    float *k = malloc(2 * 32 * sizeof *k), *v = malloc(2 * 32 * sizeof *v);
    for (int64_t pos = 0; pos < N; pos++) { /* row by row, as decode steps */
        kv_pool_grow(p, &s, pos + 1);
        for (int64_t l = 0; l < 4; l++) {
            for (int i = 0; i < 64; i++)
                k[i] = (float)(pos * 1000 + l * 100 + i), v[i] = -k[i];
            struct kv_layout L = kv_store_layout(st, l);
            kv_write_rows(&L, kv_layer_windowed(mem, l) ? s.wtable : s.table, 2, pos, 1, k, v);
        }
        s.n_pos = pos + 1;
    }
    int32_t ident[8];
    kv_identity_table(ident, 8);
    CHECK(kv_store_create(mem, kv_blocks_for(N), 0, NULL, &out) == IG_OK);
    kv_copy_seq_windowed(out, ident, NULL, 0, st, s.table, s.wtable, 0, N);
    int64_t first = (N - 1 - (WINDOW - 1)) / KV_BLOCK * KV_BLOCK; /* the first row held */
    int bad = 0;
    for (int64_t l = 0; l < 4; l++) {
        struct kv_layout L = kv_store_layout(out, l);
        for (int64_t h = 0; h < 2; h++)
            for (int64_t pos = 0; pos < N; pos++) {
                const float *kr = kv_row(&L, L.k, ident, h, pos);
                bool gone = kv_layer_windowed(mem, l) && pos < first;
                float want = gone ? 0.0f : (float)(pos * 1000 + l * 100 + h * 32);
                bad += kr[0] != want || ((const float *)kv_row(&L, L.v, ident, h, pos))[0] != -want;
            }
    }
    CHECKF(bad == 0, "%d rows copied out of the window side wrong", bad);
    /* and back into a fresh sequence that holds the window only (a load) */
    struct kv_seq t;
    CHECK(kv_seq_init(&t, N) == IG_OK);
    kv_pool_release(p, &s);
    CHECK(kv_pool_admit(p, &t, NULL, 0, N) == IG_OK);
    kv_pool_grow_loaded(p, &t, N);
    kv_copy_seq_windowed(st, t.table, t.wtable, 0, out, ident, NULL, 0, N);
    CHECK(kv_store_create(mem, kv_blocks_for(N), 0, NULL, &back) == IG_OK);
    kv_copy_seq_windowed(back, ident, NULL, 0, st, t.table, t.wtable, 0, N);
    size_t bytes = (size_t)kv_blocks_for(N) * (size_t)mem->block_bytes;
    CHECK(!memcmp(back->base, out->base, bytes)); /* the same layout: every byte */
    kv_pool_release(p, &t);
    free(k);
    free(v);
    kv_seq_destroy(&s);
    kv_seq_destroy(&t);
    kv_store_free(back);
    kv_store_free(out);
    kv_store_free(st);
    kv_pool_free(p);
}

int main(void)
{
    struct kv_memory *mem = memory();
    check_bytes(mem);
    check_pool();
    check_store(mem);
    kv_memory_free(mem);
    return test_summary("test_kvwindow");
}
