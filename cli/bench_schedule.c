/* cli/bench_schedule.c: the arrival times, range lengths and service
 * objectives of `ignite bench --requests` (cli/bench_schedule.h), drawn as
 * vLLM's benchmarks/serve.py and datasets/random.py draw them, from our own
 * generator (so a seed gives other numbers than numpy's, the same
 * distributions). Covered by tests/cli/test_bench_arrivals.py. */
#include "cli/bench_schedule.h"

#include "cli/cli.h"
#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

uint64_t bench_rand(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform on (0, 1): never 0, so its log is finite. */
static double unit_open(uint64_t *s)
{
    return ((double)(bench_rand(s) >> 11) + 0.5) * 0x1.0p-53;
}

static double normal(uint64_t *s)
{
    double u1 = unit_open(s), u2 = unit_open(s);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2); /* Box-Muller */
}

/* Gamma(shape k, scale 1): Marsaglia and Tsang's method (ACM TOMS 26(3),
 * 2000); below shape 1, Gamma(k + 1) U^(1/k), their boost. */
static double gamma_draw(uint64_t *s, double k)
{
    if (k == 1.0)
        return -log(unit_open(s));
    if (k < 1.0)
        return gamma_draw(s, k + 1.0) * pow(unit_open(s), 1.0 / k);
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = normal(s);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        if (log(unit_open(s)) < 0.5 * x * x + d - d * v + d * log(v))
            return d * v;
    }
}

void bench_arrivals(int64_t n, double rate, double burstiness, uint64_t seed, double *at_s)
{
    /* a stream of its own: a rate changes no length or token of the requests */
    uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ 0xA5A5F00DCAFEBEEFull;
    double t = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isinf(rate))
            t = 0;
        else if (isinf(burstiness))
            t += 1.0 / rate;
        else
            t += gamma_draw(&s, burstiness) / (rate * burstiness); /* mean 1/rate */
        at_s[i] = t;
    }
    /* vLLM rescales the sum so the run's offered load is exactly n/rate
     * (the raw sum strays 1-2 % by seed) */
    if (n && at_s[n - 1] > 0) {
        double f = (double)n / rate / at_s[n - 1];
        for (int64_t i = 0; i < n; i++)
            at_s[i] *= f;
    }
}

int bench_check_schedule(int64_t n, double rate)
{
    if (isinf(rate) || (double)n / rate <= BENCH_MAX_SCHEDULE_S)
        return IG_OK;
    return ig_error(IG_E_USAGE, "--request-rate %g: %lld requests would arrive over %g s, more "
                    "than a day (%.0f s)", rate, (long long)n, (double)n / rate,
                    BENCH_MAX_SCHEDULE_S);
}

int64_t bench_draw_range(uint64_t *s, double len, double ratio)
{
    int64_t lo = (int64_t)floor(len * (1.0 - ratio)), hi = (int64_t)ceil(len * (1.0 + ratio));
    lo = lo < 1 ? 1 : lo;
    hi = hi < lo ? lo : hi;
    return lo + (int64_t)(bench_rand(s) % (uint64_t)(hi - lo + 1));
}

int bench_parse_rate(const char *what, const char *arg, double *rate)
{
    if (!strcasecmp(arg, "inf")) {
        *rate = INFINITY;
        return IG_OK;
    }
    double v;
    if (cli_parse_f64(what, arg, 0, 1e9, &v) != IG_OK)
        return IG_E_USAGE;
    if (v <= 0)
        return ig_error(IG_E_USAGE, "%s: expected a number > 0 or inf, got '%s'", what, arg);
    *rate = v;
    return IG_OK;
}

bool bench_goodput_word(const char *arg)
{
    return !strncmp(arg, "ttft:", 5) || !strncmp(arg, "tpot:", 5) || !strncmp(arg, "e2el:", 5);
}

int bench_parse_goodput(const char *arg, struct bench_slo *slo)
{
    char buf[256];
    if (strlen(arg) >= sizeof buf)
        return ig_error(IG_E_USAGE, "--goodput: too long: '%.40s...'", arg);
    strcpy(buf, arg);
    for (char *w = buf, *comma; w; w = comma ? comma + 1 : NULL) {
        if ((comma = strchr(w, ',')))
            *comma = '\0';
        if (!*w) /* ttft:1,,tpot:2 or a comma at an end: a part left out */
            return ig_error(IG_E_USAGE, "--goodput: empty item in '%s' (write ttft:MS, tpot:MS "
                            "or e2el:MS between the commas)", arg);
        double *at = !strncmp(w, "ttft:", 5)   ? &slo->ttft_ms
                     : !strncmp(w, "tpot:", 5) ? &slo->tpot_ms
                     : !strncmp(w, "e2el:", 5) ? &slo->e2el_ms : NULL;
        if (!at)
            return ig_error(IG_E_USAGE, "--goodput: expected ttft:MS, tpot:MS or e2el:MS, got "
                            "'%s'", w);
        if (*at >= 0) /* which of two would count is a guess */
            return ig_error(IG_E_USAGE, "--goodput: %.4s given twice", w);
        if (cli_parse_f64("--goodput", w + 5, 0, 1e12, at) != IG_OK)
            return IG_E_USAGE;
    }
    return IG_OK;
}
