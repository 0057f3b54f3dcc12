/* cli/device_args.c: llama.cpp's -ngl and -fa words, parsed and checked,
 * and the KV cache's types (--cache-type, -ctk, -ctv) (cli/device.h). Apart from device.c, which needs the backends, so that
 * the option parsers (and their fuzz target, fuzz_batch) link without them.
 * Covered by tests/cli/test_args.sh. */
#include "cli/device.h"

#include "cli/cli.h"
#include "core/status.h"

#include <stdint.h>
#include <string.h>

/* The value of one item of a comma list, or of the whole word without one:
 * the items must all say the same (bench runs one device and one
 * attention). Returns the first item's length, or -1 when items differ. */
static int one_value(const char *arg, bool list)
{
    size_t n = list ? strcspn(arg, ",") : strlen(arg);
    for (const char *s = arg + n; *s == ',';) {
        size_t m = strcspn(s + 1, ",");
        if (m != n || strncmp(s + 1, arg, n))
            return -1;
        s += 1 + m;
    }
    return (int)n;
}

int cli_parse_ngl(const char *arg, bool list, int64_t *ngl)
{
    int n = one_value(arg, list);
    if (n < 0)
        return ig_error(IG_E_USAGE, "-ngl %s: bench takes one value (ignite runs every layer "
                        "on one device): run it once per device, --device cpu and cuda", arg);
    char one[32];
    if ((size_t)n >= sizeof one)
        return ig_error(IG_E_USAGE, "--n-gpu-layers: expected an integer in [-1, %d], got '%s'",
                        INT32_MAX, arg);
    memcpy(one, arg, (size_t)n);
    one[n] = '\0';
    return cli_parse_i64("--n-gpu-layers", one, -1, INT32_MAX, ngl);
}

int cli_parse_flash_attn(const char *arg, bool list)
{
    int n = one_value(arg, list);
    static const char *const words[] = {"on", "off", "auto", "1", "0"};
    for (size_t i = 0; n >= 0 && i < sizeof words / sizeof words[0]; i++)
        if ((size_t)n == strlen(words[i]) && !strncmp(arg, words[i], (size_t)n)) {
            if (i == 1 || i == 4) /* off, 0 */
                ig_warn("-fa %.*s: ignite always uses its fused attention kernels", n, arg);
            return IG_OK;
        }
    return ig_error(IG_E_USAGE, "--flash-attn: expected on, off or auto (or 1, 0)%s, got '%s'",
                    list ? " once, or a list of the same" : "", arg);
}

int cli_parse_cache_type(enum cli_cache_which which, const char *arg, struct cli_cache_types *t)
{
    static const char *const names[] = {"--cache-type", "--cache-type-k", "--cache-type-v"};
    enum kv_dtype d;
    if (kv_dtype_parse(names[which], arg, &d) != IG_OK)
        return IG_E_USAGE;
    if (which != CLI_CACHE_V)
        t->k = d;
    if (which != CLI_CACHE_K)
        t->v = d;
    t->given = true;
    return IG_OK;
}
