/* tests/kvcache/test_kvcache.c: the paged cache and the file format without a
 * model: CRC-32C and SHA-256 against published vectors; growth a block at a
 * time with rows across block edges read back; the up-front refusal of a
 * context that cannot fit; tiled attention through a block table of
 * scattered blocks equal (bit for bit) to the same keys in one contiguous
 * block; a saved cache read back exactly (also with n_pos on a block edge),
 * and every refused file: bad magic, another version, another model, a bad
 * token id, a flipped byte (checksum), truncation at many lengths, and
 * bytes after the checksum. */
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

/* Fills positions [0, n) of every layer with random K and V (f32 rows). */
static void fill(struct kv_cache *kv, int64_t n)
{
    int64_t kv_dim = kv->n_head_kv * kv->head_dim;
    float *k = malloc((size_t)(n * kv_dim) * sizeof *k), *v = malloc((size_t)(n * kv_dim) * sizeof *v);
    for (int64_t l = 0; l < kv->n_layer; l++) {
        for (int64_t i = 0; i < n * kv_dim; i++)
            k[i] = frand(), v[i] = frand();
        kv_cache_write(kv, l, 0, n, k, v);
    }
    kv->n_pos = n;
    free(k);
    free(v);
}

static void check_growth(void)
{
    struct model_hparams hp = small_hp();
    struct kv_cache *kv;
    CHECK(kv_cache_create(&hp, 600, KV_F32, NULL, &kv) == IG_OK);
    size_t per_block = (size_t)(2 * hp.n_layer * hp.n_head_kv * KV_BLOCK * hp.head_dim) * 4;
    CHECK(kv->max_blocks == 3 && kv->n_blocks == 0 && kv_cache_bytes(kv) == 0);
    CHECK(kv_cache_bytes_for(&hp, 600, KV_F32) == 3.0 * (double)per_block);
    CHECK(kv_cache_reserve(kv, 1) == IG_OK && kv_cache_bytes(kv) == per_block);
    CHECK(kv_cache_reserve(kv, KV_BLOCK) == IG_OK && kv->n_blocks == 1);
    CHECK(kv_cache_reserve(kv, KV_BLOCK + 1) == IG_OK && kv_cache_bytes(kv) == 2 * per_block);

    /* rows straddling the block edge, written in one call, read back */
    int64_t kv_dim = hp.n_head_kv * hp.head_dim, p0 = KV_BLOCK - 3, n = 6;
    float k[6 * 48], v[6 * 48];
    for (int64_t i = 0; i < n * kv_dim; i++)
        k[i] = (float)i, v[i] = (float)-i;
    kv_cache_write(kv, 1, p0, n, k, v);
    int bad = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < hp.n_head_kv; h++) {
            const float *kr = kv_cache_rows(kv, kv_cache_k_table(kv, 1), h, p0 + t);
            const float *vr = kv_cache_rows(kv, kv_cache_v_table(kv, 1), h, p0 + t);
            for (int64_t d = 0; d < hp.head_dim; d++)
                bad += kr[d] != k[t * kv_dim + h * hp.head_dim + d] ||
                       vr[d] != v[t * kv_dim + h * hp.head_dim + d];
        }
    CHECKF(bad == 0, "%d elements differ across the block edge", bad);
    kv_cache_free(kv);

    /* a context that could never fit is refused before anything is allocated */
    fprintf(stderr, "(one error line expected)\n");
    hp.n_layer = 1000, hp.n_head_kv = 64, hp.head_dim = 256;
    CHECK(kv_cache_create(&hp, (int64_t)1 << 30, KV_F32, NULL, &kv) == IG_E_NOMEM && kv == NULL);
}

/* Attention over a paged cache (blocks allocated in scattered order by the
 * allocator) equals attention over the same rows copied into one block. */
static void check_paged_attention(struct ops_pool *pool)
{
    struct model_hparams hp = small_hp();
    hp.n_layer = 1;
    int64_t n_pos = 2 * KV_BLOCK + 70, n_q = 37, hd = hp.head_dim;
    struct kv_cache *kv;
    CHECK(kv_cache_create(&hp, n_pos, KV_F32, NULL, &kv) == IG_OK);
    CHECK(kv_cache_reserve(kv, n_pos) == IG_OK);
    fill(kv, n_pos);

    size_t head = (size_t)(n_pos * hd);
    float *kc = malloc(head * (size_t)hp.n_head_kv * sizeof *kc);
    float *vc = malloc(head * (size_t)hp.n_head_kv * sizeof *vc);
    for (int64_t h = 0; h < hp.n_head_kv; h++)
        for (int64_t p = 0; p < n_pos; p++) {
            memcpy(kc + (size_t)h * head + (size_t)(p * hd),
                   kv_cache_rows(kv, kv_cache_k_table(kv, 0), h, p), (size_t)hd * 4);
            memcpy(vc + (size_t)h * head + (size_t)(p * hd),
                   kv_cache_rows(kv, kv_cache_v_table(kv, 0), h, p), (size_t)hd * 4);
        }
    int64_t q_dim = hp.n_head * hd;
    float *q = malloc((size_t)(n_q * q_dim) * sizeof *q);
    float *o1 = malloc((size_t)(n_q * q_dim) * sizeof *o1);
    float *o2 = malloc((size_t)(n_q * q_dim) * sizeof *o2);
    for (int64_t i = 0; i < n_q * q_dim; i++)
        q[i] = 2.0f * frand();
    int64_t stride = attn_tiled_scratch_floats(hp.n_head, hp.n_head_kv, hd);
    float *scratch = malloc((size_t)(stride * ops_pool_threads(pool)) * sizeof *scratch);
    struct attn_params p = {
        .q = q, .q_tok_stride = q_dim, .k_blocks = kv_cache_k_table(kv, 0),
        .v_blocks = kv_cache_v_table(kv, 0), .block_size = KV_BLOCK, .kv_dtype = KV_F32,
        .kv_head_stride = KV_BLOCK * hd, .out = o1, .out_tok_stride = q_dim, .n_tokens = n_q,
        .pos0 = n_pos - n_q, .n_head = hp.n_head, .n_head_kv = hp.n_head_kv, .head_dim = hd,
        .scale = 0.25f,
    };
    attn_tiled_run(&p, pool, scratch, stride);
    void *kcp = kc, *vcp = vc;
    p.k_blocks = &kcp, p.v_blocks = &vcp, p.block_size = n_pos, p.kv_head_stride = n_pos * hd;
    p.out = o2;
    attn_tiled_run(&p, pool, scratch, stride);
    CHECKF(memcmp(o1, o2, (size_t)(n_q * q_dim) * sizeof *o1) == 0,
           "paged vs contiguous attention differ (first %g vs %g)", o1[0], o2[0]);
    free(scratch);
    free(o2);
    free(o1);
    free(q);
    free(vc);
    free(kc);
    kv_cache_free(kv);
}

/* ---- the file format ------------------------------------------------------------ */

struct saved {
    unsigned char *data;
    size_t len;
};

static struct saved save(const struct kv_cache *kv, const unsigned char *id, const int32_t *tok,
                         const float *logits, int64_t n_vocab)
{
    struct saved s = {0};
    FILE *f = open_memstream((char **)&s.data, &s.len);
    CHECK(f && kv_file_write(f, "mem", kv, id, tok, logits, n_vocab) == IG_OK);
    fclose(f);
    return s;
}

/* Reads `len` bytes of `data` as a cache file into a fresh cache; returns the
 * status and, on success, the cache in *out. */
static int load(const struct model_hparams *hp, const unsigned char *id, const void *data,
                size_t len, struct kv_cache **out, int32_t *tok, float *logits)
{
    *out = NULL;
    FILE *f = fmemopen((void *)data, len ? len : 1, "rb");
    if (!len)
        fgetc(f); /* fmemopen needs a size >= 1: consume it for an empty stream */
    struct kv_file_reader r;
    int st = kv_file_read_header(&r, f, "mem", hp, id);
    if (st == IG_OK &&
        (st = kv_cache_create(hp, r.hdr.n_tokens + 5, r.hdr.dtype, NULL, out)) == IG_OK)
        st = kv_file_read_body(&r, *out, tok, logits);
    fclose(f);
    if (st != IG_OK) {
        kv_cache_free(*out);
        *out = NULL;
    }
    return st;
}

static int same_rows(const struct kv_cache *a, const struct kv_cache *b)
{
    size_t row = (size_t)a->head_dim * kv_dtype_bytes(a->dtype);
    for (int64_t l = 0; l < a->n_layer; l++)
        for (int64_t h = 0; h < a->n_head_kv; h++)
            for (int64_t p = 0; p < a->n_pos; p++)
                if (memcmp(kv_cache_rows(a, kv_cache_k_table(a, l), h, p),
                           kv_cache_rows(b, kv_cache_k_table(b, l), h, p), row) ||
                    memcmp(kv_cache_rows(a, kv_cache_v_table(a, l), h, p),
                           kv_cache_rows(b, kv_cache_v_table(b, l), h, p), row))
                    return 0;
    return a->n_pos == b->n_pos;
}

static void check_file(enum kv_dtype dt, int64_t n_pos)
{
    struct model_hparams hp = small_hp();
    unsigned char id[32], other[32];
    for (int i = 0; i < 32; i++)
        id[i] = (unsigned char)i, other[i] = (unsigned char)(i + 1);
    struct kv_cache *kv, *back;
    CHECK(kv_cache_create(&hp, n_pos, dt, NULL, &kv) == IG_OK &&
          kv_cache_reserve(kv, n_pos) == IG_OK);
    fill(kv, n_pos);
    int32_t *tok = malloc((size_t)n_pos * sizeof *tok), *tok2 = malloc((size_t)n_pos * sizeof *tok);
    float logits[100], logits2[100];
    for (int64_t i = 0; i < n_pos; i++)
        tok[i] = (int32_t)(i * 7 % hp.n_vocab);
    for (int i = 0; i < 100; i++)
        logits[i] = frand();
    struct saved s = save(kv, id, tok, logits, hp.n_vocab);
    size_t want = 88 + (size_t)n_pos * 4 + 400 + 4 +
                  (size_t)(2 * hp.n_layer * hp.n_head_kv * n_pos * hp.head_dim) * kv_dtype_bytes(dt);
    CHECKF(s.len == want, "file of %zu bytes, want %zu", s.len, want);

    CHECK(load(&hp, id, s.data, s.len, &back, tok2, logits2) == IG_OK);
    CHECK(back && same_rows(kv, back) && !memcmp(tok, tok2, (size_t)n_pos * 4) &&
          !memcmp(logits, logits2, sizeof logits));
    kv_cache_free(back);

    fprintf(stderr, "(error lines expected below)\n");
    unsigned char *bad = malloc(s.len);
    memcpy(bad, s.data, s.len);
    bad[0] = 'X';
    CHECK(load(&hp, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    memcpy(bad, s.data, s.len);
    bad[8] = 2; /* version 2 */
    CHECK(load(&hp, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(&hp, other, s.data, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    memcpy(bad, s.data, s.len);
    bad[88] = 0xff; /* token 0 = -1 byte pattern start: out of range */
    bad[91] = 0xff;
    CHECK(load(&hp, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    for (size_t at = 100; at < s.len; at += s.len / 5) {
        memcpy(bad, s.data, s.len);
        bad[at] ^= 0x10;
        CHECKF(load(&hp, id, bad, s.len, &back, tok2, logits2) == IG_E_KVFILE,
               "a flipped bit at byte %zu was not caught", at);
    }
    static const size_t cuts[] = {0, 1, 8, 15, 16, 40, 87, 88, 89, 200};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        CHECKF(load(&hp, id, s.data, cuts[i], &back, tok2, logits2) == IG_E_KVFILE,
               "a file cut at %zu bytes was not refused", cuts[i]);
    CHECK(load(&hp, id, s.data, s.len / 2, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(&hp, id, s.data, s.len - 1, &back, tok2, logits2) == IG_E_KVFILE);
    /* bytes after the checksum: one, and a whole second file (cat a b) */
    unsigned char *two = malloc(2 * s.len);
    memcpy(two, s.data, s.len);
    memcpy(two + s.len, s.data, s.len);
    CHECK(load(&hp, id, two, s.len + 1, &back, tok2, logits2) == IG_E_KVFILE);
    CHECK(load(&hp, id, two, 2 * s.len, &back, tok2, logits2) == IG_E_KVFILE);
    free(two);
    struct model_hparams hp2 = hp;
    hp2.n_vocab = 50; /* the logits no longer fit this model */
    CHECK(load(&hp2, id, s.data, s.len, &back, tok2, logits2) == IG_E_KVFILE);
    free(bad);
    free(s.data);
    free(tok2);
    free(tok);
    kv_cache_free(kv);
}

int main(void)
{
    check_digests();
    check_growth();
    struct ops_pool *pool;
    if (ops_pool_create(2, &pool) != IG_OK)
        return 1;
    check_paged_attention(pool);
    ops_pool_free(pool);
    check_file(KV_F32, 3);
    check_file(KV_F32, KV_BLOCK);
    check_file(KV_F16, KV_BLOCK + 9);
    return test_summary("test_kvcache");
}
