/* cli/bench_schedule.h: what `ignite bench --requests` draws before its clock
 * starts, as vLLM's `bench serve` draws it: arrival times (--request-rate,
 * --burstiness), lengths within a range (--range-ratio) and the service
 * objectives of goodput (--goodput). Private to cli/ (cli/bench_schedule.c). */
#ifndef IGNITE_CLI_BENCH_SCHEDULE_H
#define IGNITE_CLI_BENCH_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

/* The objectives a request must meet to count toward goodput, ms; < 0: none. */
struct bench_slo {
    double ttft_ms, tpot_ms, e2el_ms;
};

/* A splitmix64 step: the benchmark's one generator (state *x). */
uint64_t bench_rand(uint64_t *x);

/* Parses --request-rate: "inf" (every request at once) or a number > 0,
 * requests/s, into *rate (INFINITY for inf). Returns IG_OK or IG_E_USAGE
 * (one line). --burstiness is parsed the same way (bench_parse_rate with its
 * own name). */
int bench_parse_rate(const char *what, const char *arg, double *rate);

/* Adds the objectives in `arg` to *slo: items "ttft:MS", "tpot:MS" or
 * "e2el:MS" (vLLM's spelling), separated by commas (none empty), MS >= 0;
 * vLLM's separate words come one call each. *slo's unset objectives are
 * < 0, and one set twice is refused. Returns
 * IG_OK or IG_E_USAGE (one line naming the bad word). */
int bench_parse_goodput(const char *arg, struct bench_slo *slo);

/* True when `arg` reads as one goodput word ("ttft:..."), so that the words
 * after --goodput on the command line can be taken as vLLM takes them. */
bool bench_goodput_word(const char *arg);

/* at_s[0..n): the requests' arrival times, seconds after the start, as vLLM's
 * get_request draws them: gaps from a gamma distribution of shape
 * `burstiness` and mean 1/rate (burstiness 1: Poisson arrivals; INFINITY: a
 * constant gap), summed, then scaled so the last arrives at n/rate; rate
 * INFINITY: all at 0. Seeded by `seed` alone. */
void bench_arrivals(int64_t n, double rate, double burstiness, uint64_t seed, double *at_s);

/* The longest schedule --request-rate may ask for: the last of n requests
 * arrives at n/rate, and a rate of 1e-9 (a typo of 1e9) would have bench
 * wait for decades, past what a time in nanoseconds holds. */
#define BENCH_MAX_SCHEDULE_S 86400.0

/* IG_OK, or IG_E_USAGE (one line) where n requests at `rate` arrive over
 * more than BENCH_MAX_SCHEDULE_S. */
int bench_check_schedule(int64_t n, double rate);

/* A length drawn uniformly from the integers [floor(len (1 - ratio)),
 * ceil(len (1 + ratio))], at least 1 (vLLM's random dataset). */
int64_t bench_draw_range(uint64_t *s, double len, double ratio);

#endif
