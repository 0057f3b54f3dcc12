/* cli/bench_fill.h: `ignite bench --depth-fill N`'s cache fill: the first N
 * positions of -d's depth prefilled by the model, the rest copies of their
 * K/V rows (cli/bench_fill.c). Private to cli/. */
#ifndef IGNITE_CLI_BENCH_FILL_H
#define IGNITE_CLI_BENCH_FILL_H

#include "backend/backend.h"

#include <stdint.h>

/* Positions [n_real, depth) of the sequence in slot 0 with block table
 * `table` (covering depth) set to copies of its positions [0, n_real), in
 * turn: position p gets position p % n_real's K/V rows (and every recurrent
 * layer keeps its state). Positions [0, n_real) must be cached (a prefill),
 * n_real a multiple of KV_BLOCK and 0 < n_real < depth. Goes through the
 * backend's kv_export and kv_import, so any backend. Returns IG_OK or
 * IG_E_NOMEM (one line). */
int bench_fill_copies(struct backend *be, const int32_t *table, int64_t n_real, int64_t depth);

#endif
