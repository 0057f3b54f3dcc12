/* tests/kvcache/test_kvcache.c: the KV pool and the file format without a
 * model: CRC-32C and SHA-256 against published vectors; the bytes formula;
 * rows across a block edge through a table of scattered blocks read back;
 * the up-front refusal of a pool that cannot fit; the block allocator
 * (reservation, growth, release, least-recently-freed reuse, prefix sharing
 * with reference counts, a block handed out anew leaving the index, a block
 * rewritten in place invalidating what hung off it: the generation
 * counter); tiled attention through a table of scattered blocks equal (bit
 * for bit) to the same rows in blocks in order; a saved cache read back
 * exactly (also with n_pos on a block edge), and in the parts batch --pd
 * sends (rows cut inside blocks, read back part by part), a version 1 file (written here
 * by the old format's table) read into the same rows, and every refused
 * file: bad magic, another version, another model, other layers, a bad
 * token id, a flipped byte (checksum), truncation at many lengths, and bytes
 * after the checksum. Layers of every kind are tests/kvcache/test_kvmem.c's.
 * The mutants these checks were run against: docs/testing-mutants.md. */
#include "core/checksum.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "ops/ops.h"
#include "prefill/attn_tiled.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static struct model_hparams small_hp(void)
{
    struct model_hparams hp = {.n_layer = 2, .n_head = 6, .n_head_kv = 3, .head_dim = 16,
                               .n_vocab = 100};
    return hp;
}

static void hex(const unsigned char *d, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_digests(void)
{
    CHECK(ig_crc32c(0, "123456789", 9) == 0xe3069283u);
    CHECK(ig_crc32c(ig_crc32c(0, "1234", 4), "56789", 5) == 0xe3069283u);
    static const struct { const char *in, *want; } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct ig_sha256 s;
        unsigned char d[32];
        char got[65];
        ig_sha256_init(&s);
        /* byte by byte for one of them: the incremental path */
        if (i == 2)
            for (size_t j = 0; j < strlen(v[i].in); j++)
                ig_sha256_update(&s, v[i].in + j, 1);
        else
            ig_sha256_update(&s, v[i].in, strlen(v[i].in));
        ig_sha256_final(&s, d);
        hex(d, got);
        CHECKF(!strcmp(got, v[i].want), "sha256(\"%s\") = %s, want %s", v[i].in, got, v[i].want);
    }
}

/* small_hp's layers: full attention, one shape. */
static struct kv_memory *small_memory(enum kv_dtype dt)
{
    struct model_hparams hp = small_hp();
    struct kv_memory *mem = NULL;
    CHECK(kv_memory_uniform(dt, hp.n_layer, hp.n_head_kv, hp.head_dim, &mem) == IG_OK);
    return mem;
}

/* A store of n_blocks blocks of small_hp's shape. */
static struct kv_store *make_store(enum kv_dtype dt, int64_t n_blocks)
{
    struct kv_memory *mem = small_memory(dt);
    struct kv_store *st = NULL;
    CHECK(kv_store_create(mem, n_blocks, 0, NULL, &st) == IG_OK);
    kv_memory_free(mem);
    return st;
}

/* Fills positions [0, n) of every layer through `table` with random K, V. */
static void fill(struct kv_store *st, const int32_t *table, int64_t n)
{
    const struct kv_layer_mem *L0 = &st->memory->layers[0];
    int64_t kv_dim = L0->n_head_kv * L0->head_dim;
    float *k = malloc((size_t)(n * kv_dim) * sizeof *k), *v = malloc((size_t)(n * kv_dim) * sizeof *v);
    for (int64_t l = 0; l < st->memory->n_layer; l++) {
        for (int64_t i = 0; i < n * kv_dim; i++)
            k[i] = frand(), v[i] = frand();
        struct kv_layout L = kv_store_layout(st, l);
        kv_write_rows(&L, table, L0->n_head_kv, 0, n, k, v);
    }
    free(k);
    free(v);
}

/* True when positions [0, n) of every layer are the same bytes in both. */
static int same_rows(const struct kv_store *a, const int32_t *ta, const struct kv_store *b,
                     const int32_t *tb, int64_t n)
{
    const struct kv_layer_mem *L0 = &a->memory->layers[0];
    size_t row = (size_t)L0->head_dim * kv_dtype_bytes(a->memory->dtype);
    for (int64_t l = 0; l < a->memory->n_layer; l++) {
        struct kv_layout la = kv_store_layout(a, l), lb = kv_store_layout(b, l);
        for (int64_t h = 0; h < L0->n_head_kv; h++)
            for (int64_t p = 0; p < n; p++)
                if (memcmp(kv_row(&la, la.k, ta, h, p), kv_row(&lb, lb.k, tb, h, p), row) ||
                    memcmp(kv_row(&la, la.v, ta, h, p), kv_row(&lb, lb.v, tb, h, p), row))
                    return 0;
    }
    return 1;
}

static void check_store(void)
{
    struct model_hparams hp = small_hp();
    struct kv_memory *mem = small_memory(KV_F32);
    size_t per_block = (size_t)(2 * hp.n_layer * hp.n_head_kv * KV_BLOCK * hp.head_dim) * 4;
    CHECK(mem->block_bytes == per_block && mem->state_bytes == 0 && mem->n_groups == 1);
    CHECK(kv_memory_bytes(mem, 3, 0) == 3.0 * (double)per_block);
    kv_memory_free(mem);
    CHECK(kv_blocks_for(1) == 1 && kv_blocks_for(KV_BLOCK) == 1 && kv_blocks_for(KV_BLOCK + 1) == 2);

    /* rows straddling a block edge, written in one call through a table of
     * blocks out of order, read back */
    struct kv_store *st = make_store(KV_F32, 4);
    int32_t table[2] = {3, 1};
    struct kv_layout L = kv_store_layout(st, 1);
    int64_t kv_dim = hp.n_head_kv * hp.head_dim, p0 = KV_BLOCK - 3, n = 6;
    float k[6 * 48], v[6 * 48];
    for (int64_t i = 0; i < n * kv_dim; i++)
        k[i] = (float)i, v[i] = (float)-i;
    kv_write_rows(&L, table, hp.n_head_kv, p0, n, k, v);
    int bad = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < hp.n_head_kv; h++) {
            const float *kr = kv_row(&L, L.k, table, h, p0 + t);
            const float *vr = kv_row(&L, L.v, table, h, p0 + t);
            for (int64_t d = 0; d < hp.head_dim; d++)
                bad += kr[d] != k[t * kv_dim + h * hp.head_dim + d] ||
                       vr[d] != v[t * kv_dim + h * hp.head_dim + d];
        }
    CHECKF(bad == 0, "%d elements differ across the block edge", bad);
    /* position p0 is row KV_BLOCK - 3 of block 3, KV head 2 */
    CHECK((const float *)kv_row(&L, L.k, table, 2, p0) ==
          (const float *)L.k + 3 * L.block_stride + 2 * L.head_stride + (KV_BLOCK - 3) * hp.head_dim);
    kv_store_free(st);

    /* a pool that could never fit is refused before anything is mapped */
    fprintf(stderr, "(one error line expected)\n");
    CHECK(kv_memory_uniform(KV_F32, 1000, 64, 256, &mem) == IG_OK);
    st = NULL;
    CHECK(kv_store_create(mem, (int64_t)1 << 24, 0, NULL, &st) == IG_E_NOMEM && st == NULL);
    kv_memory_free(mem);
}

/* ---- the allocator ----------------------------------------------------------------- */

static void tokens_of(int32_t *t, int64_t n, int32_t seed)
{
    for (int64_t i = 0; i < n; i++)
        t[i] = (int32_t)((i * 31 + seed) % 1000);
}

static void check_pool(void)
{
    struct kv_pool *p;
    CHECK(kv_pool_create(10, 0, true, &p) == IG_OK);
    int32_t ta[6 * KV_BLOCK], tb[6 * KV_BLOCK];
    tokens_of(ta, 6 * KV_BLOCK, 1);
    memcpy(tb, ta, sizeof tb);
    tb[3 * KV_BLOCK + 5] = 999999; /* b shares a's first three blocks */
    struct kv_seq a, b, c;
    CHECK(kv_seq_init(&a, 8 * KV_BLOCK) == IG_OK && kv_seq_init(&b, 8 * KV_BLOCK) == IG_OK &&
          kv_seq_init(&c, 8 * KV_BLOCK) == IG_OK);

    /* a reserves 5 blocks, takes them as it grows */
    CHECK(kv_pool_match(p, ta, 6 * KV_BLOCK, 5) == 0);
    CHECK(kv_pool_admit(p, &a, ta, 0, 5 * KV_BLOCK) == IG_OK);
    CHECK(kv_pool_available(p) == 5 && kv_pool_used(p) == 0);
    kv_pool_grow(p, &a, 3 * KV_BLOCK + 1);
    CHECK(a.n_blocks == 4 && a.reserved == 1 && kv_pool_used(p) == 4);
    CHECK(kv_pool_available(p) == 5); /* taking reserved blocks changes nothing for others */
    /* a cannot reserve 6 more: refused without a change */
    CHECK(!kv_pool_can_admit(p, tb, 0, 6 * KV_BLOCK));
    CHECK(kv_pool_admit(p, &b, tb, 0, 6 * KV_BLOCK) == IG_E_NOMEM && b.n_blocks == 0);
    CHECK(kv_pool_available(p) == 5);

    /* a has written 3 full blocks and part of a fourth: three enter the index */
    a.n_pos = 3 * KV_BLOCK + 1;
    kv_pool_register(p, &a, ta);
    CHECK(kv_pool_match(p, tb, 6 * KV_BLOCK, 5) == 3);
    CHECK(kv_pool_match(p, tb, 6 * KV_BLOCK, 2) == 2); /* capped */
    CHECK(kv_pool_match(p, tb, 2 * KV_BLOCK + 10, 5) == 2); /* whole blocks of the prompt only */
    int32_t other[KV_BLOCK];
    tokens_of(other, KV_BLOCK, 7);
    CHECK(kv_pool_match(p, other, KV_BLOCK, 1) == 0);

    /* b shares them: one new block reserved, the shared ones referenced twice */
    CHECK(kv_pool_admit(p, &b, tb, 3, 4 * KV_BLOCK) == IG_OK);
    CHECK(b.n_pos == 3 * KV_BLOCK && b.n_blocks == 3 && b.reserved == 1);
    CHECK(!memcmp(a.table, b.table, 3 * sizeof *a.table));
    CHECK(kv_pool_hits(p) == 3 && kv_pool_used(p) == 4 && kv_pool_available(p) == 4);
    kv_pool_grow(p, &b, 4 * KV_BLOCK);
    CHECK(b.table[3] != a.table[3]);

    /* a ends: the shared blocks stay with b, a's fourth goes back */
    int32_t a3 = a.table[3];
    kv_pool_release(p, &a);
    CHECK(a.n_blocks == 0 && kv_pool_used(p) == 4 && kv_pool_available(p) == 6);
    /* b ends: its blocks are free but stay shareable until handed out */
    int32_t shared0 = b.table[0];
    kv_pool_release(p, &b);
    CHECK(kv_pool_used(p) == 0 && kv_pool_available(p) == 10);
    CHECK(kv_pool_match(p, ta, 6 * KV_BLOCK, 5) == 3);

    /* c, a different prompt, takes 6 blocks: the never-used ones first, then
     * the least recently freed: a's fourth (not indexed), b's last, ... */
    int32_t tc[6 * KV_BLOCK];
    tokens_of(tc, 6 * KV_BLOCK, 3);
    CHECK(kv_pool_admit(p, &c, tc, 0, 6 * KV_BLOCK) == IG_OK);
    kv_pool_grow(p, &c, 6 * KV_BLOCK);
    int took_a3 = 0, took_shared0 = 0;
    for (int64_t i = 0; i < c.n_blocks; i++)
        took_a3 |= c.table[i] == a3, took_shared0 |= c.table[i] == shared0;
    CHECK(took_a3 && !took_shared0);
    /* the prefix survives: the first shared block was freed last */
    CHECK(kv_pool_match(p, ta, 6 * KV_BLOCK, 5) >= 1);
    kv_pool_release(p, &c);

    /* A block handed out anew drops out of the index (kv_pool_grow's
     * index_remove): its old tokens never match again, and once both blocks
     * hold other tokens only the new content matches. (What hung off a
     * block whose content changed is the next case's.) */
    struct kv_pool *q;
    CHECK(kv_pool_create(2, 0, true, &q) == IG_OK);
    CHECK(kv_pool_admit(q, &a, ta, 0, 2 * KV_BLOCK) == IG_OK);
    kv_pool_grow(q, &a, 2 * KV_BLOCK);
    a.n_pos = 2 * KV_BLOCK;
    kv_pool_register(q, &a, ta);
    CHECK(kv_pool_match(q, ta, 2 * KV_BLOCK, 2) == 2);
    kv_pool_release(q, &a); /* block 1 goes back first, then block 0 */
    CHECK(kv_pool_admit(q, &b, tc, 0, KV_BLOCK) == IG_OK);
    kv_pool_grow(q, &b, KV_BLOCK); /* takes a's second block */
    CHECK(kv_pool_match(q, ta, 2 * KV_BLOCK, 2) == 1);
    kv_pool_release(q, &b);
    CHECK(kv_pool_admit(q, &b, tc, 0, 2 * KV_BLOCK) == IG_OK);
    kv_pool_grow(q, &b, 2 * KV_BLOCK); /* both of a's blocks, with other tokens */
    b.n_pos = 2 * KV_BLOCK;
    kv_pool_register(q, &b, tc);
    CHECK(kv_pool_match(q, ta, 2 * KV_BLOCK, 2) == 0);
    CHECK(kv_pool_match(q, tc, 2 * KV_BLOCK, 2) == 2);
    kv_pool_release(q, &b);
    kv_pool_free(q);

    /* A block rewritten in place gets a new generation, so what hung off its
     * old content never matches again. a enters 3 blocks, goes back into its
     * second (kv_pool_shrink: that block leaves the index, the third goes
     * back to the pool but stays indexed, hanging off the second), writes
     * other tokens there and enters the second again. A prompt of a's new
     * first two blocks and its old third block must match 2 blocks, not 3:
     * the old third block's K/V were computed after the old second block.
     * Without the generation counter (parent_gen in the index key) the old
     * entry is found under the same (parent id, tokens). */
    struct kv_pool *r;
    CHECK(kv_pool_create(4, 0, true, &r) == IG_OK);
    CHECK(kv_pool_admit(r, &a, ta, 0, 3 * KV_BLOCK) == IG_OK);
    kv_pool_grow(r, &a, 3 * KV_BLOCK);
    a.n_pos = 3 * KV_BLOCK;
    kv_pool_register(r, &a, ta);
    CHECK(kv_pool_match(r, ta, 3 * KV_BLOCK, 3) == 3);
    int32_t old3 = a.table[2];
    kv_pool_shrink(r, &a, KV_BLOCK + 5);
    CHECK(a.n_blocks == 2 && kv_pool_used(r) == 2);
    CHECK(kv_pool_match(r, ta, 3 * KV_BLOCK, 3) == 1); /* the second left the index */
    int32_t tn[3 * KV_BLOCK], tq[3 * KV_BLOCK];
    memcpy(tn, ta, sizeof tn);
    for (int64_t i = KV_BLOCK + 5; i < 3 * KV_BLOCK; i++)
        tn[i] = 500000 + (int32_t)i; /* the turn written again, another third block */
    memcpy(tq, tn, 2 * KV_BLOCK * sizeof *tq);
    memcpy(tq + 2 * KV_BLOCK, ta + 2 * KV_BLOCK, KV_BLOCK * sizeof *tq); /* the old third */
    CHECK(kv_pool_reserve(r, &a, 3 * KV_BLOCK) == IG_OK);
    kv_pool_grow(r, &a, 3 * KV_BLOCK); /* takes the never-used block, not old3 */
    CHECKF(a.table[2] != old3 && kv_pool_used(r) == 3,
           "the old third block was handed out: the case tests nothing");
    a.n_pos = 3 * KV_BLOCK;
    kv_pool_register(r, &a, tn);
    CHECK(kv_pool_match(r, tn, 3 * KV_BLOCK, 3) == 3); /* the new content is entered */
    CHECKF(kv_pool_match(r, tq, 3 * KV_BLOCK, 3) == 2,
           "a block that hung off the old content of a rewritten block matched");
    kv_pool_release(r, &a);
    kv_pool_free(r);

    /* without sharing, nothing is matched or entered */
    struct kv_pool *ns;
    CHECK(kv_pool_create(4, 0, false, &ns) == IG_OK);
    CHECK(kv_pool_admit(ns, &a, ta, 0, 2 * KV_BLOCK) == IG_OK);
    kv_pool_grow(ns, &a, 2 * KV_BLOCK);
    a.n_pos = 2 * KV_BLOCK;
    kv_pool_register(ns, &a, ta);
    CHECK(kv_pool_match(ns, ta, 2 * KV_BLOCK, 2) == 0);
    kv_pool_release(ns, &a);
    kv_pool_free(ns);

    /* A sequence that goes back (a turn undone): blocks past the new end go
     * back to the pool, the block the end falls in leaves the index (it will
     * be written again), the blocks before it stay shareable; a new
     * reservation is promised or refused whole. */
    struct kv_pool *sh;
    CHECK(kv_pool_create(6, 0, true, &sh) == IG_OK);
    CHECK(kv_pool_admit(sh, &a, ta, 0, 4 * KV_BLOCK) == IG_OK);
    kv_pool_grow(sh, &a, 3 * KV_BLOCK + 10);
    a.n_pos = 3 * KV_BLOCK + 10;
    kv_pool_register(sh, &a, ta);
    CHECK(kv_pool_match(sh, ta, 4 * KV_BLOCK, 4) == 3);
    kv_pool_shrink(sh, &a, KV_BLOCK + 5);
    CHECK(a.n_pos == KV_BLOCK + 5 && a.n_blocks == 2 && a.reserved == 0);
    CHECK(kv_pool_used(sh) == 2 && kv_pool_available(sh) == 4);
    CHECK(kv_pool_match(sh, ta, 4 * KV_BLOCK, 4) == 1);
    CHECK(kv_pool_reserve(sh, &a, 7 * KV_BLOCK) == IG_E_NOMEM && a.reserved == 0);
    CHECK(kv_pool_reserve(sh, &a, 6 * KV_BLOCK) == IG_OK && a.reserved == 4);
    CHECK(kv_pool_available(sh) == 0);
    CHECK(kv_pool_reserve(sh, &a, 3 * KV_BLOCK) == IG_OK && a.reserved == 4); /* already */
    kv_pool_grow(sh, &a, 4 * KV_BLOCK);
    a.n_pos = 4 * KV_BLOCK;
    kv_pool_shrink(sh, &a, 2 * KV_BLOCK); /* on a block edge: both kept blocks stay */
    CHECK(a.n_blocks == 2 && kv_pool_used(sh) == 2 && kv_pool_available(sh) == 4);
    kv_pool_shrink(sh, &a, 0);
    CHECK(a.n_blocks == 0 && kv_pool_used(sh) == 0 && kv_pool_available(sh) == 6);
    kv_pool_release(sh, &a);
    kv_pool_free(sh);

    kv_seq_destroy(&a);
    kv_seq_destroy(&b);
    kv_seq_destroy(&c);
    kv_pool_free(p);
}

/* Attention through a table of scattered blocks equals attention over the
 * same rows in blocks in order. */
static void check_paged_attention(struct ops_pool *pool)
{
    struct model_hparams hp = small_hp();
    int64_t n_pos = 2 * KV_BLOCK + 70, n_q = 37, hd = hp.head_dim, nb = kv_blocks_for(n_pos);
    struct kv_store *st = make_store(KV_F32, 2 * nb);
    int32_t scattered[8], in_order[8];
    for (int64_t b = 0; b < nb; b++)
        scattered[b] = (int32_t)(2 * nb - 1 - b), in_order[b] = (int32_t)b;
    fill(st, scattered, n_pos);
    kv_copy_seq(st, in_order, 0, st, scattered, 0, n_pos);
    CHECK(same_rows(st, in_order, st, scattered, n_pos));

    int64_t q_dim = hp.n_head * hd;
    float *q = malloc((size_t)(n_q * q_dim) * sizeof *q);
    float *o1 = malloc((size_t)(n_q * q_dim) * sizeof *o1);
    float *o2 = malloc((size_t)(n_q * q_dim) * sizeof *o2);
    for (int64_t i = 0; i < n_q * q_dim; i++)
        q[i] = 2.0f * frand();
    int64_t stride = attn_tiled_scratch_floats(hp.n_head, hp.n_head_kv, hd);
    float *scratch = malloc((size_t)(stride * ops_pool_threads(pool)) * sizeof *scratch);
    struct attn_seq seq = {.q = q, .out = o1, .table = scattered, .n_tokens = n_q,
                           .pos0 = n_pos - n_q};
    int64_t items[2];
    struct attn_params p = {
        .kv = kv_store_layout(st, 1), .seqs = &seq, .n_seqs = 1, .item_offsets = items,
        .q_tok_stride = q_dim, .out_tok_stride = q_dim, .n_head = hp.n_head,
        .n_head_kv = hp.n_head_kv, .head_dim = hd, .scale = 0.25f,
    };
    attn_tiled_run(&p, pool, scratch, stride);
    seq.table = in_order;
    seq.out = o2;
    attn_tiled_run(&p, pool, scratch, stride);
    CHECKF(memcmp(o1, o2, (size_t)(n_q * q_dim) * sizeof *o1) == 0,
           "scattered vs in-order blocks: attention differs (first %g vs %g)", o1[0], o2[0]);
    free(scratch);
    free(o2);
    free(o1);
    free(q);
    kv_store_free(st);
}

/* ---- the file format ------------------------------------------------------------ */

struct saved {
    unsigned char *data;
    size_t len;
};

static struct saved save(const struct kv_store *st, const int32_t *table, int64_t n_pos,
                         const unsigned char *id, const int32_t *tok, const float *logits,
                         int64_t n_vocab)
{
    struct saved s = {0};
    FILE *f = open_memstream((char **)&s.data, &s.len);
    CHECK(f && kv_file_write(f, "mem", st, table, 0, n_pos, id, tok, logits, n_vocab) == IG_OK);
    fclose(f);
    return s;
}

/* Reads `len` bytes of `data` as a cache file of a model with `mem`'s
 * layers and n_vocab tokens into a fresh store; returns the status and, on
 * success, the store in *out. */
static int load(const struct kv_memory *mem, int64_t n_vocab, const unsigned char *id,
                const void *data, size_t len, struct kv_store **out, int32_t *tok,
                float *logits)
{
    *out = NULL;
    FILE *f = fmemopen((void *)data, len ? len : 1, "rb");
    if (!len)
        fgetc(f); /* fmemopen needs a size >= 1: consume it for an empty stream */
    struct kv_file_reader r;
    int st = kv_file_read_header(&r, f, "mem", mem, n_vocab, id);
    if (st == IG_OK)
        st = kv_file_read_body(&r, out, tok, logits);
    fclose(f);
    CHECK((st == IG_OK) == (*out != NULL));
    return st;
}

/* Bytes of a version 2 file's head and tables for n_layer layers in one
 * group (docs/kvcache.md): 80 + 24 a group + 40 a layer. */
static size_t v2_head(int64_t n_layer)
{
    return 80 + 24 + 40 * (size_t)n_layer;
}

static void put_le(unsigned char **p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *(*p)++ = (unsigned char)(v >> (8 * i));
}

/* A version 1 file (written before groups: one shape, every layer) of the
 * sequence in `st` through `table`, by the old format's table in
 * docs/kvcache.md rather than by kvfile.c. */
static struct saved save_v1(const struct kv_store *st, const int32_t *table, int64_t n_pos,
                            const unsigned char *id, const int32_t *tok, const float *logits,
                            int64_t n_vocab)
{
    const struct kv_memory *mem = st->memory;
    const struct kv_layer_mem *L0 = &mem->layers[0];
    size_t elem = kv_dtype_bytes(mem->dtype), row = (size_t)L0->head_dim * elem;
    size_t len = 88 + (size_t)n_pos * 4 + (size_t)n_vocab * 4 +
                 2 * (size_t)(mem->n_layer * L0->n_head_kv * n_pos) * row + 4;
    struct saved s = {malloc(len), len};
    unsigned char *p = s.data;
    memcpy(p, "IGNITEKV", 8);
    p += 8;
    put_le(&p, 1, 4);
    put_le(&p, (uint64_t)mem->dtype, 4);
    memcpy(p, id, 32);
    p += 32;
    int64_t fields[] = {mem->n_layer, L0->n_head_kv, L0->head_dim, n_pos, n_vocab};
    for (int i = 0; i < 5; i++)
        put_le(&p, (uint64_t)fields[i], 8);
    memcpy(p, tok, (size_t)n_pos * 4);
    p += n_pos * 4;
    memcpy(p, logits, (size_t)n_vocab * 4);
    p += n_vocab * 4;
    for (int64_t l = 0; l < mem->n_layer; l++) {
        struct kv_layout L = kv_store_layout(st, l);
        for (int kind = 0; kind < 2; kind++)
            for (int64_t h = 0; h < L0->n_head_kv; h++)
                for (int64_t pos = 0; pos < n_pos; pos++) {
                    memcpy(p, kv_row(&L, kind ? L.v : L.k, table, h, pos), row);
                    p += row;
                }
    }
    put_le(&p, ig_crc32c(0, s.data, len - 4), 4);
    CHECK((size_t)(p - s.data) == len);
    return s;
}

static void check_file(enum kv_dtype dt, int64_t n_pos)
{
    struct model_hparams hp = small_hp();
    struct kv_memory *mem = small_memory(KV_F32); /* the model's layers (any dtype) */
    unsigned char id[32], other[32];
    for (int i = 0; i < 32; i++)
        id[i] = (unsigned char)i, other[i] = (unsigned char)(i + 1);
    int64_t nb = kv_blocks_for(n_pos);
    struct kv_store *kv = make_store(dt, nb + 2), *back;
    int32_t *table = malloc((size_t)nb * sizeof *table), *ident = malloc((size_t)nb * sizeof *ident);
    for (int64_t b = 0; b < nb; b++)
        table[b] = (int32_t)(nb + 1 - b); /* out of order: the file is in position order */
    kv_identity_table(ident, nb);
    fill(kv, table, n_pos);
    int32_t *tok = malloc((size_t)n_pos * sizeof *tok), *tok2 = malloc((size_t)n_pos * sizeof *tok);
    float logits[100], logits2[100];
    for (int64_t i = 0; i < n_pos; i++)
        tok[i] = (int32_t)(i * 7 % hp.n_vocab);
    for (int i = 0; i < 100; i++)
        logits[i] = frand();
    struct saved s = save(kv, table, n_pos, id, tok, logits, hp.n_vocab);
    size_t head = v2_head(hp.n_layer), rows = (size_t)(2 * hp.n_layer * hp.n_head_kv * n_pos *
                                                       hp.head_dim) * kv_dtype_bytes(dt);
    size_t want = head + (size_t)n_pos * 4 + 400 + rows + 4;
    CHECKF(s.len == want, "file of %zu bytes, want %zu", s.len, want);

    CHECK(load(mem, hp.n_vocab, id, s.data, s.len, &back, tok2, logits2) == IG_OK);
    CHECK(back && back->memory->dtype == dt && same_rows(kv, table, back, ident, n_pos) &&
          !memcmp(tok, tok2, (size_t)n_pos * 4) && !memcmp(logits, logits2, sizeof logits));
    kv_store_free(back);

    /* Version 1, as ignite wrote it before groups: the same rows, the same
     * body after its 88-byte head. */
    struct saved v1 = save_v1(kv, table, n_pos, id, tok, logits, hp.n_vocab);
    CHECK(v1.len == want - head + 88 && !memcmp(v1.data + 88, s.data + head, v1.len - 92));
    memset(tok2, 0, (size_t)n_pos * 4);
    CHECK(load(mem, hp.n_vocab, id, v1.data, v1.len, &back, tok2, logits2) == IG_OK);
    CHECK(back && same_rows(kv, table, back, ident, n_pos) &&
          !memcmp(tok, tok2, (size_t)n_pos * 4) && !memcmp(logits, logits2, sizeof logits));
    kv_store_free(back);

    fprintf(stderr, "(error lines expected below)\n");
    unsigned char *bad = malloc(s.len);
    memcpy(bad, s.data, s.len);
    bad[0] = 'X';
    CHECK(load(mem, hp.n_vocab, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    memcpy(bad, s.data, s.len);
    bad[8] = KV_FILE_VERSION + 1; /* a later version */
    CHECK(load(mem, hp.n_vocab, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(mem, hp.n_vocab, other, s.data, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(mem, hp.n_vocab, other, v1.data, v1.len, &back, tok2, logits2) == IG_E_KVFILE);
    memcpy(bad, s.data, s.len);
    bad[head] = 0xff; /* token 0 = -1 byte pattern start: out of range */
    bad[head + 3] = 0xff;
    CHECK(load(mem, hp.n_vocab, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    /* a layer of the tables that is not the model's (3 KV heads: 4) */
    memcpy(bad, s.data, s.len);
    bad[80 + 24 + 40 + 8] = 4;
    CHECK(load(mem, hp.n_vocab, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    for (size_t at = 100; at < s.len; at += s.len / 5) {
        memcpy(bad, s.data, s.len);
        bad[at] ^= 0x10;
        CHECKF(load(mem, hp.n_vocab, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE,
               "a flipped bit at byte %zu was not caught", at);
    }
    size_t cuts[] = {0, 1, 8, 15, 16, 40, 79, 80, 81, head - 1, head, head + 1, head + 100};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        CHECKF(load(mem, hp.n_vocab, id, s.data, cuts[i], &back, tok2, logits2) == IG_E_KVFILE,
               "a file cut at %zu bytes was not refused", cuts[i]);
    CHECK(load(mem, hp.n_vocab, id, s.data, s.len / 2, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(mem, hp.n_vocab, id, s.data, s.len - 1, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(mem, hp.n_vocab, id, v1.data, v1.len - 1, &back, tok2, logits2) == IG_E_KVFILE);
    /* bytes after the checksum: one, and a whole second file (cat a b) */
    unsigned char *two = malloc(2 * s.len);
    memcpy(two, s.data, s.len);
    memcpy(two + s.len, s.data, s.len);
    CHECK(load(mem, hp.n_vocab, id, two, s.len + 1, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(mem, hp.n_vocab, id, two, 2 * s.len, &back, tok2, logits2) == IG_E_KVFILE);
    free(two);
    /* the logits no longer fit this model */
    CHECK(load(mem, 50, id, s.data, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    /* other layers: a third layer, another head dim */
    struct kv_memory *mem2 = NULL;
    CHECK(kv_memory_uniform(KV_F32, hp.n_layer + 1, hp.n_head_kv, hp.head_dim, &mem2) == IG_OK);
    CHECK(load(mem2, hp.n_vocab, id, s.data, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(mem2, hp.n_vocab, id, v1.data, v1.len, &back, tok2, logits2) == IG_E_KVFILE);
    kv_memory_free(mem2);
    CHECK(kv_memory_uniform(KV_F32, hp.n_layer, hp.n_head_kv, 2 * hp.head_dim, &mem2) == IG_OK);
    CHECK(load(mem2, hp.n_vocab, id, s.data, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(mem2, hp.n_vocab, id, v1.data, v1.len, &back, tok2, logits2) == IG_E_KVFILE);
    kv_memory_free(mem2);
    free(bad);
    free(v1.data);
    free(s.data);
    free(tok2);
    free(tok);
    free(ident);
    free(table);
    kv_store_free(kv);
    kv_memory_free(mem);
}

/* Writes one part (kv_file_write_*'s call in `part`) and appends it to *all. */
#define PART(all, call)                                                                       \
    do {                                                                                      \
        char *b_ = NULL;                                                                      \
        size_t n_ = 0;                                                                        \
        FILE *f_ = open_memstream(&b_, &n_);                                                  \
        CHECK(f_ && (call) == IG_OK);                                                         \
        fclose(f_);                                                                           \
        (all)->data = realloc((all)->data, (all)->len + n_ + 1);                              \
        memcpy((all)->data + (all)->len, b_, n_);                                             \
        (all)->len += n_;                                                                     \
        free(b_);                                                                             \
    } while (0)

/* The parts a cache goes in while it is written (batch --pd): the head, the
 * tokens and each layer over [0, n) are kv_file_write's bytes but the
 * checksum; rows cut at positions inside blocks ([0, 5), [5, 70), [70, n))
 * read back part by part into a store are the rows; a window table's
 * given-back block (-1) is written as zeros. */
static void check_parts(int64_t n_pos)
{
    struct model_hparams hp = small_hp();
    struct kv_memory *mem = small_memory(KV_F32);
    unsigned char id[32] = {7};
    int64_t nb = kv_blocks_for(n_pos), L = hp.n_layer;
    struct kv_store *kv = make_store(KV_F16, nb + 1), *back = NULL;
    int32_t *table = malloc((size_t)nb * sizeof *table), *ident = malloc((size_t)nb * 4);
    for (int64_t b = 0; b < nb; b++)
        table[b] = (int32_t)(nb - b);
    kv_identity_table(ident, nb);
    fill(kv, table, n_pos);
    int32_t *tok = malloc((size_t)n_pos * 4), *tok2 = malloc((size_t)n_pos * 4);
    float logits[100], logits2[100];
    for (int64_t i = 0; i < n_pos; i++)
        tok[i] = (int32_t)(i * 5 % hp.n_vocab);
    for (int i = 0; i < 100; i++)
        logits[i] = frand();
    struct saved whole = save(kv, table, n_pos, id, tok, logits, hp.n_vocab), cat = {0};
    PART(&cat, kv_file_write_head(f_, "mem", kv->memory, n_pos, id, hp.n_vocab));
    PART(&cat, kv_file_write_tokens(f_, "mem", tok, n_pos, logits, hp.n_vocab));
    for (int64_t l = 0; l < L; l++)
        PART(&cat, kv_file_write_layer(f_, "mem", kv, table, NULL, 0, l, 0, n_pos));
    CHECK(cat.len == whole.len - 4 && !memcmp(cat.data, whole.data, cat.len));

    int64_t cut[] = {0, 5, 70, n_pos};
    struct saved head = {0}, end = {0}, rows[3][8] = {{{0}}};
    CHECK(L <= 8);
    PART(&head, kv_file_write_head(f_, "mem", kv->memory, n_pos, id, hp.n_vocab));
    PART(&end, kv_file_write_tokens(f_, "mem", tok, n_pos, logits, hp.n_vocab));
    for (int c = 0; c < 3; c++)
        for (int64_t l = 0; l < L; l++)
            PART(&rows[c][l], kv_file_write_layer(f_, "mem", kv, table, NULL, 0, l, cut[c],
                                                  cut[c + 1]));
    struct kv_file_reader r;
    FILE *f = fmemopen(head.data, head.len, "rb");
    CHECK(kv_file_read_header(&r, f, "mem", mem, hp.n_vocab, id) == IG_OK);
    fclose(f);
    CHECK(kv_file_new_store(&r, &back) == IG_OK && back->memory->dtype == KV_F16);
    for (int c = 2; c >= 0; c--) /* (any order: each part knows its rows) */
        for (int64_t l = 0; l < L; l++) {
            r.f = fmemopen(rows[c][l].data, rows[c][l].len, "rb");
            CHECK(kv_file_read_layer(&r, back, l, cut[c], cut[c + 1]) == IG_OK &&
                  fgetc(r.f) == EOF);
            fclose(r.f);
        }
    r.f = fmemopen(end.data, end.len, "rb");
    CHECK(kv_file_read_tokens(&r, tok2, logits2) == IG_OK && fgetc(r.f) == EOF);
    fclose(r.f);
    CHECK(same_rows(kv, table, back, ident, n_pos) && !memcmp(tok, tok2, (size_t)n_pos * 4) &&
          !memcmp(logits, logits2, sizeof logits));
    /* the window rule's given-back block: zeros (the table stands in for a
     * window table: a uniform memory has no window layer, so wtable is not
     * read; the -1 goes through `table`) */
    table[0] = -1;
    struct saved z = {0};
    PART(&z, kv_file_write_layer(f_, "mem", kv, table, NULL, 0, 0, 0, 2));
    int nonzero = 0;
    for (size_t i = 0; i < z.len; i++)
        nonzero |= z.data[i];
    CHECK(z.len == (size_t)(2 * hp.n_head_kv * 2 * hp.head_dim * 2) && !nonzero);
    free(z.data);
    for (int c = 0; c < 3; c++)
        for (int64_t l = 0; l < L; l++)
            free(rows[c][l].data);
    free(head.data);
    free(end.data);
    free(cat.data);
    free(whole.data);
    free(tok);
    free(tok2);
    free(ident);
    free(table);
    kv_store_free(back);
    kv_store_free(kv);
    kv_memory_free(mem);
}

int main(void)
{
    check_digests();
    check_store();
    check_pool();
    struct ops_pool *pool;
    if (ops_pool_create(2, &pool) != IG_OK)
        return 1;
    check_paged_attention(pool);
    ops_pool_free(pool);
    check_file(KV_F32, 3);
    check_file(KV_F32, KV_BLOCK);
    check_file(KV_F16, 4 * KV_BLOCK + 9);
    check_parts(2 * KV_BLOCK + 9);
    return test_summary("test_kvcache");
}
