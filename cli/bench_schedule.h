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

/* Adds the objectives in `arg` to *slo: words "ttft:MS", "tpot:MS" or
 * "e2el:MS" (vLLM's spelling), separated by spaces or commas, MS >= 0.
 * Returns IG_OK or IG_E_USAGE (one line naming the bad word). */
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

/* A length drawn uniformly from the integers [floor(len (1 - ratio)),
 * ceil(len (1 + ratio))], at least 1 (vLLM's random dataset). */
int64_t bench_draw_range(uint64_t *s, double len, double ratio);

#endif
