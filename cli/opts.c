/* cli/opts.c: option tables -> getopt_long and --help; number parsing.
 * Covered by tests/cli/test_run_args.sh. */
#include "cli/cli.h"

#include "core/mapped_file.h"
#include "core/paths.h"
#include "core/status.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_parser_init(struct cli_parser *p, const struct cli_option *table)
{
    int n = 0;
    char *s = p->shortopts;
    *s++ = ':'; /* report a missing argument as ':' so we can word the error */
    for (; table[n].name; n++) {
        IG_ASSERT(n < CLI_MAX_OPTIONS);
        p->longopts[n] = (struct option){table[n].name, table[n].has_arg, NULL, table[n].key};
        if (table[n].key > 0 && table[n].key < 256) {
            *s++ = (char)table[n].key;
            if (table[n].has_arg == required_argument)
                *s++ = ':';
        }
    }
    *s = '\0';
    p->longopts[n] = (struct option){0, 0, 0, 0};
}

void cli_print_help(FILE *out, const char *usage, const char *summary,
                    const struct cli_option *table)
{
    fprintf(out, "usage: %s\n\n%s\n\noptions:\n", usage, summary);
    for (const struct cli_option *o = table; o->name; o++) {
        char left[64];
        if (o->key > 0 && o->key < 256)
            snprintf(left, sizeof left, "-%c, --%s%s%s", o->key, o->name,
                     o->metavar ? " " : "", o->metavar ? o->metavar : "");
        else
            snprintf(left, sizeof left, "    --%s%s%s", o->name,
                     o->metavar ? " " : "", o->metavar ? o->metavar : "");
        fprintf(out, "  %-28s %s", left, o->help);
        if (o->def)
            fprintf(out, " (default: %s)", o->def);
        fputc('\n', out);
    }
}

int cli_unexpected_argument(const char *cmd, const char *arg, const char *hint)
{
    return ig_error(IG_E_USAGE, "unexpected argument '%s' (%s%s'ignite %s --help' lists the "
                    "options)", arg, hint ? hint : "", hint ? "; " : "", cmd);
}

int cli_option_error(const char *cmd, int key, char **argv)
{
    const char *bad = optind > 0 ? argv[optind - 1] : "?";
    char opt[3] = {'-', (char)optopt, '\0'};
    if (key != ':' && optopt > 0 && optopt < 256)
        bad = opt; /* an unknown short option inside a group such as -qx */
    return ig_error(IG_E_USAGE, "%s option %s (run 'ignite %s --help' for the options)",
                    key == ':' ? "missing value for" : "unknown", bad, cmd);
}

void cli_load_mode(unsigned flag)
{
    static unsigned flags;
    flags |= flag;
    ig_map_set_mode(flags);
}

/* The length of a run of decimal digits at s. */
static size_t digits(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    return n;
}

bool cli_scan_i64(const char *s, int64_t *out)
{
    const char *d = s + (*s == '-');
    if (!digits(d) || d[digits(d)] != '\0')
        return false;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE)
        return false;
    *out = v;
    return true;
}

/* True when s is a decimal real as cli.h spells it: strtod alone would also
 * take white space, hex, inf and nan. */
static bool is_decimal_real(const char *s)
{
    s += *s == '-';
    size_t whole = digits(s);
    s += whole;
    size_t frac = 0;
    if (*s == '.')
        s += 1 + (frac = digits(s + 1));
    if (!whole && !frac)
        return false;
    if (*s == 'e' || *s == 'E') {
        s += 1 + (s[1] == '+' || s[1] == '-');
        if (!digits(s))
            return false;
        s += digits(s);
    }
    return *s == '\0';
}

int cli_parse_i64(const char *what, const char *s, int64_t min, int64_t max, int64_t *out)
{
    int64_t v;
    if (!cli_scan_i64(s, &v) || v < min || v > max)
        return ig_error(IG_E_USAGE, "%s: expected an integer in [%lld, %lld], got '%s'",
                        what, (long long)min, (long long)max, s);
    *out = v;
    return IG_OK;
}

/* A bound as people write it: whole numbers in full (1048576, not %g's
 * 1.04858e+06), others with %g. */
static const char *bound_str(double v, char *buf, size_t cap)
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, cap, "%.0f", v);
    else
        snprintf(buf, cap, "%g", v);
    return buf;
}

int cli_parse_f64(const char *what, const char *s, double min, double max, double *out)
{
    char lo[32], hi[32];
    errno = 0;
    double v = is_decimal_real(s) ? strtod(s, NULL) : NAN;
    if (errno == ERANGE || !isfinite(v) || v < min || v > max)
        return ig_error(IG_E_USAGE, "%s: expected a number in [%s, %s], got '%s'", what,
                        bound_str(min, lo, sizeof lo), bound_str(max, hi, sizeof hi), s);
    *out = v;
    return IG_OK;
}

int cli_model_path(const char *arg, char *buf, size_t cap)
{
    if (arg) {
        if (strlen(arg) >= cap)
            return ig_error(IG_E_USAGE, "model path is too long");
        memcpy(buf, arg, strlen(arg) + 1);
        return IG_OK;
    }
    int st = ig_default_model_path(buf, cap);
    if (st != IG_OK)
        return st;
    if (access(buf, R_OK) != 0)
        return ig_error(IG_E_USAGE,
                        "no -m/--model given and the default model is not at '%s' "
                        "(run 'make fetch-model')", buf);
    return IG_OK;
}
