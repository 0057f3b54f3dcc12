/* tests/emu/kv_export_bytes.h: a sequence's cache as PD's parts, for the PD
 * tests (test_backend_pd_emu.c, pd_nccl_emu.c) to compare byte for byte:
 * every layer's rows [0, n) of sequence seq of backend g, exported and
 * written as kv_file_write_layer writes a part, into one buffer (free it). */
#ifndef IGNITE_TESTS_EMU_KV_EXPORT_BYTES_H
#define IGNITE_TESTS_EMU_KV_EXPORT_BYTES_H

#include "backend/backend.h"
#include "core/status.h"
#include "kvcache/kvcache.h"
#include "tests/test.h"

#include <stdio.h>

static char *kv_export_bytes(struct backend *g, const struct backend_seq *seq, int64_t n,
                             size_t *bytes)
{
    const struct kv_store *st = NULL;
    const int32_t *table = NULL;
    int64_t slot = 0;
    char *buf = NULL;
    *bytes = 0;
    FILE *f = open_memstream(&buf, bytes);
    CHECK(f && backend_kv_export(g, seq, n, &st, &table, &slot) == IG_OK);
    for (int64_t l = 0; f && st && l < g->m->hp.n_layer; l++)
        CHECK(kv_file_write_layer(f, "'the export'", st, table, NULL, slot, l, 0, n) == IG_OK);
    if (f)
        fclose(f);
    return buf;
}

#endif
