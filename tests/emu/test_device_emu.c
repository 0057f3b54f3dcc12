/* tests/emu/test_device_emu.c: the emulated device layer (device/device_emu.cc):
 * one device named "emulator", memory round trips, an absurd allocation
 * failing cleanly, events and the copy stream (run late: a missing wait
 * shows), no graphs (begin refuses, callers launch directly), a
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
