/* tests/emu/test_device_emu.c: the emulated device layer (device/device_emu.cc):
 * one device named "emulator", memory round trips, an absurd allocation
 * failing cleanly, events, the copy stream and the transfer stream's calls
 * (run late: a missing wait shows), no graphs (begin refuses, callers launch directly), a
 * host timer, and dev_gemm_f16 on ragged shapes against a double reference
 * (tests/emu/device_checks.h). Label emu. */
#include "tests/emu/device_checks.h"

/* The emulator's copy stream runs late (device_emu.cc), so a missing wait
 * shows: until the host waits on the copy's event the host buffer holds
 * its old bytes, and a main-stream write before that changes what the copy
 * reads; a main-stream wait runs it; a download queued without a wait for
 * the main stream's latest work gives 0xff bytes; a destroyed event's
 * record is skipped, the copies around it still run in order; a download
 * into memory not from dev_alloc_host is refused. */
static void check_late_copy_stream(struct dev *d)
{
    enum { N = 512 };
    void *p = NULL, *h = NULL;
    struct dev_event *m = NULL, *e = NULL, *gone = NULL;
    CHECK(IG_DEV(dev_alloc)(d, N, &p) == IG_OK && IG_DEV(dev_alloc_host)(d, N, &h) == IG_OK);
    CHECK(IG_DEV(dev_event_create)(d, &m) == IG_OK && IG_DEV(dev_event_create)(d, &e) == IG_OK &&
          IG_DEV(dev_event_create)(d, &gone) == IG_OK);
    if (!p || !h || !m || !e || !gone)
        return;
    unsigned char *hb = h;
    memset(hb, 0xee, N);
    CHECK(IG_DEV(dev_memset)(d, p, 1, N) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_MAIN, m) == IG_OK);
    CHECK(IG_DEV(dev_stream_wait)(d, DEV_STREAM_COPY, m) == IG_OK);
    CHECK(IG_DEV(dev_download_async)(d, DEV_STREAM_COPY, h, p, N) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_COPY, e) == IG_OK);
    CHECK(hb[0] == 0xee && hb[N - 1] == 0xee);      /* not yet */
    CHECK(IG_DEV(dev_memset)(d, p, 2, N) == IG_OK); /* no wait: the copy reads this */
    CHECK(IG_DEV(dev_sync)(d) == IG_OK && hb[0] == 0xee); /* the main stream's sync only */
    CHECK(IG_DEV(dev_event_sync)(d, e) == IG_OK);
    CHECK(hb[0] == 2 && hb[N - 1] == 2);

    /* not after the memset of 2: garbage */
    CHECK(IG_DEV(dev_download_async)(d, DEV_STREAM_COPY, h, p, N / 2) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_COPY, gone) == IG_OK);
    IG_DEV(dev_event_destroy)(d, gone);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_MAIN, m) == IG_OK);
    CHECK(IG_DEV(dev_stream_wait)(d, DEV_STREAM_COPY, m) == IG_OK);
    CHECK(IG_DEV(dev_download_async)(d, DEV_STREAM_COPY, hb + N / 2, p, N / 2) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_COPY, e) == IG_OK);
    CHECK(IG_DEV(dev_memset)(d, p, 3, N) == IG_OK);
    CHECK(hb[0] == 2 && hb[N / 2] == 2);
    CHECK(IG_DEV(dev_stream_wait)(d, DEV_STREAM_MAIN, e) == IG_OK);
    CHECK(hb[0] == 0xff && hb[N / 2 - 1] == 0xff && hb[N / 2] == 3 && hb[N - 1] == 3);
    /* into memory not from dev_alloc_host (pageable on a GPU: a synchronous
     * copy), or past the end of a block: refused */
    unsigned char pageable[8];
    fprintf(stderr, "(two dev_download_async lines are expected next)\n");
    CHECK(IG_DEV(dev_download_async)(d, DEV_STREAM_COPY, pageable, p, 8) != IG_OK);
    CHECK(IG_DEV(dev_download_async)(d, DEV_STREAM_COPY, hb + N - 4, p, 8) != IG_OK);
    IG_DEV(dev_event_destroy)(d, e);
    IG_DEV(dev_event_destroy)(d, m);
    IG_DEV(dev_free_host)(d, h);
    IG_DEV(dev_free)(d, p);
}

/* What a call on the transfer stream saw: how it was called, and the first
 * byte of p then. */
struct call_log {
    const unsigned char *p;
    int n;
    enum dev_call how[4];
    unsigned char seen[4];
};

static int log_call(void *user, void *stream, enum dev_call how)
{
    struct call_log *c = user;
    (void)stream;
    if (c->n < 4) {
        c->how[c->n] = how;
        c->seen[c->n] = how == DEV_CALL_DROP ? 0 : c->p[0]; /* (dropped: p may be gone) */
    }
    c->n++;
    return c->n == 1 ? IG_E_DEVICE : IG_OK; /* (the first fails: the wait that ran it says so) */
}

/* dev_stream_call on the transfer stream (an NCCL group's way in) runs as
 * late as the copy stream's downloads: at the main stream's wait on an
 * event after it (reading memory then, after a main-stream write that did
 * not wait), or at dev_streams_run; told stale where queued before its
 * stream waited for the main stream's latest work; its status comes back
 * from what ran it; queued at dev_close, it is dropped. */
static void check_stream_calls(void)
{
    struct dev *d = NULL;
    CHECK(IG_DEV(dev_open)(0, &d) == IG_OK && d);
    void *p = NULL;
    struct dev_event *m = NULL, *e = NULL;
    CHECK(d && IG_DEV(dev_alloc)(d, 64, &p) == IG_OK && IG_DEV(dev_event_create)(d, &m) == IG_OK &&
          IG_DEV(dev_event_create)(d, &e) == IG_OK);
    if (!d || !p || !m || !e)
        return;
    struct call_log c = {.p = p};
    CHECK(IG_DEV(dev_memset)(d, p, 1, 64) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_MAIN, m) == IG_OK);
    CHECK(IG_DEV(dev_stream_wait)(d, DEV_STREAM_P2P, m) == IG_OK);
    CHECK(IG_DEV(dev_stream_call)(d, DEV_STREAM_P2P, log_call, &c) == IG_OK);
    CHECK(IG_DEV(dev_event_record)(d, DEV_STREAM_P2P, e) == IG_OK);
    CHECK(c.n == 0);                                /* not yet */
    CHECK(IG_DEV(dev_memset)(d, p, 2, 64) == IG_OK); /* no wait: the call reads this */
    CHECK(IG_DEV(dev_stream_wait)(d, DEV_STREAM_MAIN, e) == IG_E_DEVICE);
    CHECK(c.n == 1 && c.how[0] == DEV_CALL_RUN && c.seen[0] == 2);
    /* after the memset of 2 with no wait: stale; run by dev_streams_run */
    CHECK(IG_DEV(dev_stream_call)(d, DEV_STREAM_P2P, log_call, &c) == IG_OK);
    CHECK(c.n == 1 && IG_DEV(dev_streams_run)(d) == IG_OK && c.n == 2);
    CHECK(c.how[1] == DEV_CALL_STALE);
    CHECK(IG_DEV(dev_stream_call)(d, DEV_STREAM_P2P, log_call, &c) == IG_OK);
    IG_DEV(dev_event_destroy)(d, e);
    IG_DEV(dev_event_destroy)(d, m);
    IG_DEV(dev_free)(d, p);
    IG_DEV(dev_close)(d);
    CHECK(c.n == 3 && c.how[2] == DEV_CALL_DROP);
}

int main(void)
{
    CHECK(IG_DEV(dev_count)() == 1);
    struct dev *d = NULL;
    fprintf(stderr, "(a missing-device line is expected next)\n");
    CHECK(IG_DEV(dev_open)(1, &d) == IG_E_DEVICE && d == NULL);
    CHECK(IG_DEV(dev_open)(0, &d) == IG_OK && d);
    if (!d)
        return test_summary("test_device_emu");

    struct dev_info info;
    IG_DEV(dev_get_info)(d, &info);
    CHECK(strcmp(info.name, "emulator") == 0);
    CHECK(info.index == 0 && info.mem_total > 0 && info.mem_free <= info.mem_total);

    dc_check_memory(d);
    dc_check_absurd_alloc(d);
    dc_check_events(d);
    check_late_copy_stream(d);
    check_stream_calls();

    CHECK(IG_DEV(dev_graph_begin)(d) == IG_E_DEVICE);
    IG_DEV(dev_graph_free)(NULL);

    double ms = -1;
    CHECK(IG_DEV(dev_timer_start)(d) == IG_OK);
    /* f32 sums in column order: within (cols + 2) f32 roundings per addend */
    dc_check_gemms(d, 0x1p-24, "emu");
    CHECK(IG_DEV(dev_timer_stop)(d, &ms) == IG_OK);
    CHECK(ms > 0 && ms < 600e3);
    fprintf(stderr, "emu: GEMMs took %.1f ms of host time\n", ms);

    IG_DEV(dev_close)(d);
    IG_DEV(dev_close)(NULL);
    return test_summary("test_device_emu");
}
