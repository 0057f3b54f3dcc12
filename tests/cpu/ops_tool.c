/* tests/cpu/ops_tool.c: runs one ops/ primitive on inputs a test wrote, for
 * tests/cpu/test_ops_numpy.py to compare with numpy:
 *
 *   ops_tool freqs BASE N_ROT SCALING FACTOR ORIG_CTX EXT BETA_FAST BETA_SLOW ATTN [FF.f32]
 *       ops_rope_freqs; SCALING is none, linear or yarn; FF a file of N_ROT/2
 *       float32 frequency factors. Prints inv_freq[i], one per line, then the
 *       cos/sin scale, all %.17g.
 *   ops_tool rmsnorm ROWS N EPS IN.f32 W.f32 OUT.f32     ops_rmsnorm (rows of N)
 *   ops_tool geglu N GATE.f32 UP.f32 OUT.f32              ops_geglu
 *   ops_tool swiglu N GATE.f32 UP.f32 OUT.f32             ops_swiglu
 *   ops_tool softcap N CAP IN.f32 OUT.f32                  ops_softcap
 *   ops_tool hadamard N NROT IN.f32 OUT.f32              ops_hadamard_rows
 *   ops_tool kvwrite TYPE ROWS HD IN.f32 OUT.bin           kv_write_rows: ROWS rows of
 *       HD values as K (and their negation as V) of one KV head into a cache of
 *       TYPE (f32, f16, q8_0, q4_0), positions 0.. through a table of blocks in
 *       reverse order; OUT is each row's K bytes, then each row's V bytes, as
 *       the cache holds them (kv_row).
 *
 * Files are raw little-endian float32. Exits 0, or 2 on bad arguments. */
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *read_f32(const char *path, int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    FILE *f = fopen(path, "rb");
    if (!p || !f || fread(p, sizeof *p, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "ops_tool: cannot read %lld floats from %s\n", (long long)n, path);
        exit(IG_E_IO);
    }
    fclose(f);
    return p;
}

static void write_f32(const char *path, const float *p, int64_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, sizeof *p, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        fprintf(stderr, "ops_tool: cannot write %s\n", path);
        exit(IG_E_IO);
    }
}

static int freqs(int argc, char **argv)
{
    if (argc != 11 && argc != 12)
        return IG_E_USAGE;
    struct model_rope r = {0};
    r.base = atof(argv[2]);
    int64_t n_rot = atoll(argv[3]);
    r.scaling = !strcmp(argv[4], "linear") ? ROPE_SCALING_LINEAR
              : !strcmp(argv[4], "yarn")   ? ROPE_SCALING_YARN
                                           : ROPE_SCALING_NONE;
    r.factor = atof(argv[5]);
    r.orig_ctx = atoll(argv[6]);
    r.yarn_ext_factor = atof(argv[7]);
    r.yarn_beta_fast = atof(argv[8]);
    r.yarn_beta_slow = atof(argv[9]);
    r.attn_factor = atof(argv[10]);
    float *ff = argc == 12 ? read_f32(argv[11], n_rot / 2) : NULL;
    r.freq_factors = ff;
    double *inv = malloc((size_t)(n_rot / 2 + 1) * sizeof *inv), mscale;
    ops_rope_freqs(&r, n_rot, inv, &mscale);
    for (int64_t i = 0; i < n_rot / 2; i++)
        printf("%.17g\n", inv[i]);
    printf("%.17g\n", mscale);
    free(inv);
    free(ff);
    return IG_OK;
}

static int kvwrite(char **argv)
{
    enum kv_dtype dt;
    int64_t rows = atoll(argv[3]), hd = atoll(argv[4]);
    if (kv_dtype_parse("kvwrite", argv[2], &dt) != IG_OK || rows < 1 || hd < 1)
        return IG_E_USAGE;
    float *k = read_f32(argv[5], rows * hd), *v = malloc((size_t)(rows * hd) * sizeof *v);
    for (int64_t i = 0; i < rows * hd; i++)
        v[i] = -k[i];
    struct kv_memory *mem = NULL;
    struct kv_store *st = NULL;
    int64_t nb = kv_blocks_for(rows);
    int32_t *table = malloc((size_t)nb * sizeof *table);
    for (int64_t b = 0; b < nb; b++)
        table[b] = (int32_t)(nb - 1 - b);
    int s = kv_memory_uniform(dt, 1, 1, hd, &mem);
    if (s == IG_OK)
        s = kv_store_create(mem, nb, 0, NULL, &st);
    if (s != IG_OK)
        return s;
    struct kv_layout L = kv_store_layout(st, 0);
    kv_write_rows(&L, table, 1, 0, rows, k, v);
    FILE *f = fopen(argv[6], "wb");
    size_t bytes = kv_dtype_row_bytes(dt, hd);
    for (int kind = 0; f && kind < 2; kind++)
        for (int64_t p = 0; p < rows; p++)
            fwrite(kv_row(&L, kind ? L.v : L.k, table, 0, p), 1, bytes, f);
    if (!f || fclose(f) != 0) {
        fprintf(stderr, "ops_tool: cannot write %s\n", argv[6]);
        return IG_E_IO;
    }
    kv_store_free(st);
    kv_memory_free(mem);
    free(table);
    free(v);
    free(k);
    return IG_OK;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "kvwrite"))
        return kvwrite(argv);
    if (argc == 6 && !strcmp(argv[1], "hadamard")) {
        int64_t n = atoll(argv[2]), nrot = atoll(argv[3]);
        float *x = read_f32(argv[4], n);
        ops_hadamard_rows(x, n, nrot);
        write_f32(argv[5], x, n);
        free(x);
        return IG_OK;
    }
    if (argc >= 2 && !strcmp(argv[1], "freqs"))
        return freqs(argc, argv);
    if (argc == 8 && !strcmp(argv[1], "rmsnorm")) {
        int64_t rows = atoll(argv[2]), n = atoll(argv[3]);
        float *x = read_f32(argv[5], rows * n), *g = read_f32(argv[6], n);
        struct model_weight w = {QUANT_F32, 1, n, (size_t)n * 4, g, 1, NULL};
        ops_rmsnorm(x, &w, rows, n, atof(argv[4]), x); /* in place, as the block does */
        write_f32(argv[7], x, rows * n);
        free(x);
        free(g);
        return IG_OK;
    }
    if (argc == 6 && (!strcmp(argv[1], "geglu") || !strcmp(argv[1], "swiglu"))) {
        int64_t n = atoll(argv[2]);
        float *gate = read_f32(argv[3], n), *up = read_f32(argv[4], n);
        if (!strcmp(argv[1], "geglu"))
            ops_geglu(gate, up, n, true);
        else
            ops_swiglu(gate, up, n, true);
        write_f32(argv[5], gate, n);
        free(gate);
        free(up);
        return IG_OK;
    }
    if (argc == 6 && !strcmp(argv[1], "softcap")) {
        int64_t n = atoll(argv[2]);
        float *x = read_f32(argv[4], n);
        ops_softcap(x, n, atof(argv[3]));
        write_f32(argv[5], x, n);
        free(x);
        return IG_OK;
    }
    fprintf(stderr, "usage: ops_tool freqs|rmsnorm|geglu|swiglu|softcap|hadamard|kvwrite ... (see the source)\n");
    return IG_E_USAGE;
}
