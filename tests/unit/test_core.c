/* tests/unit/test_core.c: core/ primitives: half conversions against exact
 * arithmetic, status names, the cache-path rule, the hook that runs before
 * each diagnostic line, a mapped file's pages given back, the growable
 * string against the same text written into a fixed array. */
#include "core/half.h"
#include "core/mapped_file.h"
#include "core/paths.h"
#include "core/status.h"
#include "core/strbuf.h"
#include "core/utf8.h"
#include "tests/test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exact value of an f16 bit pattern computed independently with ldexp. */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_f16_all_patterns(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        int e = (h >> 10) & 31;
        float f = ig_f16_to_f32((ig_f16)h);
        if (e == 31) {
            CHECKF((h & 1023) ? isnan(f) : isinf(f), "h=%04x", h);
            if (h & 1023)
                CHECK((ig_f32_to_f16(f) & 0x7c00) == 0x7c00 && (ig_f32_to_f16(f) & 1023));
            continue;
        }
        CHECKF((double)f == f16_value((uint16_t)h), "h=%04x f=%g", h, f);
        CHECKF(ig_f32_to_f16(f) == h, "round trip h=%04x", h);
    }
}

/* The row conversions (F16C where there is one) give the scalar's bits for
 * every pattern, at every offset of an 8-wide step. */
static void test_f16_rows(void)
{
    static ig_f16 h[65536 + 7];
    static float fast[65536 + 7], portable[65536 + 7];
    for (uint32_t i = 0; i < 65536 + 7; i++)
        h[i] = (ig_f16)(i * 40503u);
    for (int off = 0; off < 3; off++) {
        ig_f16_to_f32_row(h + off, fast, 65536 + 7 - off);
        ig_f16_to_f32_row_portable(h + off, portable, 65536 + 7 - off);
        int bad = 0;
        for (uint32_t i = 0; i < 65536 + 7 - (uint32_t)off; i++) {
            float want = ig_f16_to_f32(h[off + i]);
            bad += memcmp(&fast[i], &want, 4) != 0 || memcmp(&portable[i], &want, 4) != 0;
        }
        CHECKF(bad == 0, "row conversion at offset %d: %d values differ", off, bad);
    }
}

/* f32 -> f16 rows (F16C where there is one) give the scalar's bits (itself
 * checked at every tie below) for a spread of patterns over every exponent,
 * NaNs and infinities among them, and every tie and its neighbours. */
static void test_f16_rows_from_f32(void)
{
    enum { SPREAD = 1 << 20, TIES = 4 * 0x7bff, N = SPREAD + TIES };
    static float f[N];
    static ig_f16 fast[N], portable[N];
    for (uint32_t i = 0; i < SPREAD; i++)
        f[i] = ig_bits_to_f32(i * 4093u + (i >> 7)); /* 4093 prime: every exponent */
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float mid = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2);
        float *t = f + SPREAD + 4 * h;
        t[0] = mid, t[1] = nextafterf(mid, 0), t[2] = nextafterf(mid, INFINITY), t[3] = -mid;
    }
    for (int off = 0; off < 3; off++) {
        ig_f32_to_f16_row(f + off, fast, N - off);
        ig_f32_to_f16_row_portable(f + off, portable, N - off);
        int bad = 0;
        for (int i = 0; i < N - off; i++) {
            ig_f16 want = ig_f32_to_f16(f[off + i]);
            bad += fast[i] != want || portable[i] != want;
        }
        CHECKF(bad == 0, "f32 row conversion at offset %d: %d values differ", off, bad);
    }
}

/* Round to nearest, ties to even, checked at midpoints between neighbours. */
static void test_f16_rounding(void)
{
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double lo = f16_value((uint16_t)h), hi = f16_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact in float */
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        CHECKF(ig_f32_to_f16(mid) == want, "tie h=%04x", h);
        CHECKF(ig_f32_to_f16(nextafterf(mid, 0)) == h, "below tie h=%04x", h);
        CHECKF(ig_f32_to_f16(nextafterf(mid, INFINITY)) == h + 1, "above tie h=%04x", h);
        CHECKF(ig_f32_to_f16(-mid) == (want | 0x8000), "negative tie h=%04x", h);
    }
    CHECK(ig_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(ig_f32_to_f16(65519.99f) == 0x7bff);
    CHECK(ig_f32_to_f16(1e-9f) == 0);
}

static void test_bf16(void)
{
    CHECK(ig_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(ig_f32_to_bf16(1.0f) == 0x3f80);
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: goes to even (1). */
    CHECK(ig_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
    CHECK(ig_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
    CHECK(ig_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82); /* tie to even upwards */
    CHECK(isnan(ig_bf16_to_f32(ig_f32_to_bf16(NAN))));
    CHECK(ig_f32_to_bf16(INFINITY) == 0x7f80);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ig_bf16_to_f32((ig_bf16)h);
        if (!isnan(f))
            CHECKF(ig_f32_to_bf16(f) == h, "bf16 round trip %04x", h);
    }
}

/* Strict UTF-8 against the RFC 3629 table, boundary by boundary. */
static void test_utf8(void)
{
#define LEN(str) ig_utf8_char_len((const unsigned char *)(str), sizeof(str) - 1)
    CHECK(LEN("a") == 1);
    CHECK(LEN("\x7f") == 1);
    CHECK(LEN("\xc2\x80") == 2);          /* U+0080 */
    CHECK(LEN("\xc1\xbf") == 0);          /* overlong */
    CHECK(LEN("\xe0\xa0\x80") == 3);      /* U+0800 */
    CHECK(LEN("\xe0\x9f\xbf") == 0);      /* overlong */
    CHECK(LEN("\xed\x9f\xbf") == 3);      /* U+D7FF */
    CHECK(LEN("\xed\xa0\x80") == 0);      /* surrogate U+D800 */
    CHECK(LEN("\xef\xbf\xbf") == 3);      /* U+FFFF */
    CHECK(LEN("\xf0\x90\x80\x80") == 4); /* U+10000 */
    CHECK(LEN("\xf0\x8f\xbf\xbf") == 0); /* overlong */
    CHECK(LEN("\xf4\x8f\xbf\xbf") == 4); /* U+10FFFF */
    CHECK(LEN("\xf4\x90\x80\x80") == 0); /* above U+10FFFF */
    CHECK(LEN("\xe2\x82") == 0);          /* truncated */
    CHECK(LEN("\x80") == 0 && LEN("\xff") == 0);
    CHECK(ig_utf8_char_len((const unsigned char *)"a", 0) == 0);
#undef LEN
}

static void test_paths(void)
{
    char buf[512];
    setenv("IGNITE_CACHE", "/tmp/ig-cache", 1);
    CHECK(ig_cache_dir(buf, sizeof buf) == IG_OK && !strcmp(buf, "/tmp/ig-cache"));
    unsetenv("IGNITE_CACHE");
    setenv("XDG_CACHE_HOME", "/x", 1);
    CHECK(ig_default_model_path(buf, sizeof buf) == IG_OK &&
          !strcmp(buf, "/x/ignite/" IG_DEFAULT_MODEL_FILE));
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    CHECK(ig_cache_dir(buf, sizeof buf) == IG_OK && !strcmp(buf, "/home/u/.cache/ignite"));
    CHECK(ig_cache_dir(buf, 4) == IG_E_USAGE);
}

/* The growable string: appends across its growth, printf past any fixed
 * buffer, NUL bytes inside, and a failed string that keeps its text. */
static void test_strbuf(void)
{
    struct ig_str b = {0};
    static char want[16384];
    size_t n = 0;
    bool ok = true;
    for (int i = 0; i < 2000; i++) { /* 8890 bytes: 256 doubled 6 times */
        char piece[16];
        int k = snprintf(piece, sizeof piece, "%d,", i);
        memcpy(want + n, piece, (size_t)k);
        n += (size_t)k;
        ok &= ig_str_puts(&b, piece);
    }
    CHECK(ok && b.len == n && b.cap >= n + 1 && memcmp(b.s, want, n + 1) == 0);
    char big[1200];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ig_str_printf(&b, "[%s|%d]", big, 42);
    n += (size_t)snprintf(want + n, sizeof want - n, "[%s|%d]", big, 42);
    CHECK(!b.failed && b.len == n && memcmp(b.s, want, n + 1) == 0);

    struct ig_str c = {0};
    CHECK(ig_str_putn(&c, "a\0b", 3));
    ig_str_cat(&c, "cd", "", "e", NULL);
    CHECK(c.len == 6 && memcmp(c.s, "a\0bcde", 7) == 0);
    struct ig_str e = {0};
    ig_str_printf(&e, "%s", "");
    CHECK(e.s && e.len == 0 && e.s[0] == '\0');
    /* more than memory can hold: failed, the text kept, later appends refused */
    CHECK(!ig_str_putn(&c, "x", SIZE_MAX / 2) && c.failed);
    CHECK(!ig_str_puts(&c, "zz") && c.len == 6 && memcmp(c.s, "a\0bcde", 7) == 0);
    ig_str_printf(&c, "%d", 7);
    ig_str_cat(&c, "f", NULL);
    CHECK(c.len == 6 && c.s[6] == '\0');
    free(b.s), free(c.s), free(e.s);
}

static int hook_calls;

static void count_hook(void *user)
{
    hook_calls += *(int *)user;
}

/* The hook runs once before each printed line, never for a captured or a
 * quiet one. */
static void test_diag_hook(void)
{
    int one = 1;
    char buf[64];
    ig_set_diag_hook(count_hook, &one);
    fprintf(stderr, "(two diagnostic lines expected)\n");
    ig_warn("a warning for test_diag_hook");
    CHECK(hook_calls == 1);
    CHECK(ig_error(IG_E_IO, "an error for test_diag_hook") == IG_E_IO && hook_calls == 2);
    ig_error_capture(buf, sizeof buf);
    ig_error(IG_E_IO, "captured");
    ig_error_capture(NULL, 0);
    ig_status_quiet(1);
    ig_warn("quiet");
    ig_status_quiet(0);
    CHECK(hook_calls == 2 && !strcmp(buf, "captured"));
    ig_set_diag_hook(NULL, NULL);
}

/* ig_mapped_release: a mapped file's whole pages inside the range leave
 * the process (ig_mapped_resident) and read back the file's bytes; a page
 * only partly inside stays; a file read into memory keeps its bytes. */
static void test_mapped_release(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), size = 4 * page;
    char path[] = "/tmp/ignite_test_core_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unsigned char *bytes = malloc(size);
    for (size_t i = 0; i < size; i++)
        bytes[i] = (unsigned char)(i * 7 + i / page);
    CHECK(write(fd, bytes, size) == (ssize_t)size);
    close(fd);
    for (unsigned mode = 0; mode <= IG_MAP_READ; mode += IG_MAP_READ) {
        ig_map_set_mode(mode);
        struct ig_mapped_file f;
        CHECK(ig_map_file(path, &f) == IG_OK);
        unsigned sum = 0;
        for (size_t i = 0; i < size; i++) /* every page in */
            sum += ((const volatile unsigned char *)f.data)[i];
        (void)sum;
        CHECK(ig_mapped_resident(&f) == size);
        ig_mapped_release(f.data + page / 2, 2 * page); /* page 1 whole, 0 and 2 in part */
        CHECK(ig_mapped_resident(&f) == (mode == IG_MAP_READ ? size : size - page));
        CHECK(memcmp(f.data, bytes, size) == 0);
        ig_unmap_file(&f);
    }
    ig_map_set_mode(0);
    ig_mapped_release(bytes, size); /* not a mapped file's: left alone */
    CHECK(bytes[size - 1] == (unsigned char)((size - 1) * 7 + 3));
    free(bytes);
    unlink(path);
}

int main(void)
{
    test_diag_hook();
    test_mapped_release();
    test_f16_all_patterns();
    test_f16_rows();
    test_f16_rows_from_f32();
    test_f16_rounding();
    test_bf16();
    test_utf8();
    test_paths();
    test_strbuf();
    CHECK(!strcmp(ig_status_name(IG_E_MODEL), "model"));
    return test_summary("test_core");
}
