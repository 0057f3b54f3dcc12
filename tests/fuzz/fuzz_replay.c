/* tests/fuzz/fuzz_replay.c: runs the fuzz entry (fuzz_gguf.c) without
 * libFuzzer, so ordinary and ASan builds exercise it too.
 *
 *   fuzz_replay [-m N] PATH...   each file (or each file in a directory),
 *                                then every prefix of it, then N seeded
 *                                random mutations of it (default 20000)
 *
 * Each input is copied into a buffer of exactly its size, so a sanitizer
 * sees any read past the end. Exits 0, or aborts at the first bug. */
#include "core/status.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void run_copy(const uint8_t *p, size_t n)
{
    uint8_t *b = malloc(n ? n : 1);
    IG_ASSERT(b);
    memcpy(b, p, n);
    LLVMFuzzerTestOneInput(b, n);
    free(b);
}

/* Overwrites a few bytes the way lengths, counts and offsets break. */
static void mutate(uint8_t *b, size_t n)
{
    size_t pos = (size_t)(rng() % n);
    uint64_t v = rng();
    switch (v % 4) {
    case 0: b[pos] = (uint8_t)(v >> 8); break;
    case 1: b[pos] ^= (uint8_t)(1u << ((v >> 8) % 8)); break;
    case 2: /* a small or huge little-endian u32/u64 */
        for (size_t i = 0; i < 8 && pos + i < n; i++)
            b[pos + i] = (v >> 16) & 1 ? 0xff : (i == 0 ? (uint8_t)(v >> 24) : 0);
        break;
    default: b[pos] = (uint8_t)(b[pos] + 1); break;
    }
}

static long run_file(const char *path, long n_mut)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ig_error(IG_E_IO, "cannot open %s", path);
        return -1;
    }
    uint8_t *data = NULL;
    size_t n = 0, cap = 0;
    for (int c; (c = fgetc(f)) != EOF;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            data = realloc(data, cap);
            IG_ASSERT(data);
        }
        data[n++] = (uint8_t)c;
    }
    fclose(f);
    long runs = 0;
    for (size_t len = 0; len <= n; len++, runs++)
        run_copy(data, len);
    uint8_t *m = malloc(n ? n : 1);
    IG_ASSERT(m);
    for (long i = 0; i < n_mut && n; i++, runs++) {
        memcpy(m, data, n);
        for (uint64_t k = 1 + rng() % 3; k; k--)
            mutate(m, n);
        run_copy(m, n);
    }
    free(m);
    free(data);
    return runs;
}

int main(int argc, char **argv)
{
    long n_mut = 20000, runs = 0, files = 0;
    int i = 1;
    if (argc > 2 && !strcmp(argv[1], "-m")) {
        n_mut = atol(argv[2]);
        i = 3;
    }
    for (; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0)
            return ig_error(IG_E_IO, "cannot stat %s", argv[i]);
        if (!S_ISDIR(st.st_mode)) {
            long r = run_file(argv[i], n_mut);
            if (r < 0)
                return IG_E_IO;
            runs += r, files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d)
            return ig_error(IG_E_IO, "cannot open %s", argv[i]);
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            long r = run_file(p, n_mut);
            if (r < 0) {
                closedir(d);
                return IG_E_IO;
            }
            runs += r, files++;
        }
        closedir(d);
    }
    fprintf(stderr, "fuzz_replay: %ld files, %ld inputs, no crash\n", files, runs);
    return files ? 0 : IG_E_USAGE;
}
