/* tests/gpu/test_device_gpu.c: the CUDA device layer (device/device_cuda.c)
 * on a real GPU: device info, memory round trips, a 1 PiB allocation failing
 * with IG_E_NOMEM, dev_gemm_f16 (cuBLAS) on the emulator test's ragged shapes
 * against a double reference (tests/emu/device_checks.h), a captured graph
 * (pinned upload + memset + GEMM) replayed with fresh inputs matching direct
 * launches bit for bit, the event timer, and the transfer stream (its own,
 * a dev_stream_call run at once on it). Exits 77 (skipped) without a CUDA
 * device. Label gpu. (The transfer stream's checks, p2pstream, have not
 * run on a GPU yet.) */
#include "tests/emu/device_checks.h"

/* Capture upload_async(x from pinned memory) + memset(y) + GEMM(beta 1), so
 * y = w x; replay it with two inputs and compare with the reference and,
 * bit for bit, with the same sequence launched directly. */
static void check_graph(struct dev *d)
{
    struct dc_gemm g;
    dc_gemm_init(&g, 33, 576, 17, 1, 1.0f, 99);
    for (size_t i = 0; i < dc_gemm_y_floats(&g); i++)
        g.y0[i] = 0; /* the memset's result: the reference adds y0 = 0 */
    struct dc_gemm_dev b;
    void *pinned = NULL;
    size_t xb = (size_t)(g.n * g.ld_x) * 2, yb = dc_gemm_y_floats(&g) * sizeof(float);
    float *y = (float *)dc_malloc(yb), *y_direct = (float *)dc_malloc(yb);
    int ok = dc_gemm_upload(d, &g, &b) == 0 && IG_DEV(dev_alloc_host)(d, xb, &pinned) == IG_OK;
    CHECK(ok);
    struct dev_graph *graph = NULL;
    if (ok) {
        ok = IG_DEV(dev_graph_begin)(d) == IG_OK;
        CHECK(ok);
    }
    if (ok) {
        int rc = IG_DEV(dev_upload_async)(d, b.x, pinned, xb);
        rc = rc ? rc : IG_DEV(dev_memset)(d, b.y, 0, yb);
        rc = rc ? rc : dc_gemm_run(d, &g, &b);
        int rc_end = IG_DEV(dev_graph_end)(d, &graph);
        CHECK(rc == IG_OK && rc_end == IG_OK && graph);
        ok = rc == IG_OK && rc_end == IG_OK && graph;
    }
    uint64_t rng = 12345;
    for (int round = 0; ok && round < 2; round++) {
        dc_gemm_fill_x(&g, &rng);
        dc_gemm_reference(&g);
        memcpy(pinned, g.x, xb);
        double worst = 0;
        CHECK(IG_DEV(dev_graph_launch)(d, graph) == IG_OK);
        CHECK(IG_DEV(dev_download)(d, y, b.y, yb) == IG_OK);
        CHECKF(dc_gemm_verify(&g, y, 0x1p-23, "graph", &worst) == 0, "graph replay %d", round);
        /* the same sequence, launched directly */
        CHECK(IG_DEV(dev_upload_async)(d, b.x, pinned, xb) == IG_OK);
        CHECK(IG_DEV(dev_memset)(d, b.y, 0, yb) == IG_OK);
        CHECK(dc_gemm_run(d, &g, &b) == IG_OK);
        CHECK(IG_DEV(dev_download)(d, y_direct, b.y, yb) == IG_OK);
        CHECKF(memcmp(y, y_direct, yb) == 0, "graph replay %d differs from direct launches",
               round);
        fprintf(stderr, "gpu: graph replay %d, worst error %.3g of the tolerance\n", round,
                worst);
    }

    /* the timer, around ten replays */
    double ms = -1;
    CHECK(IG_DEV(dev_timer_start)(d) == IG_OK);
    for (int i = 0; ok && i < 10; i++)
        CHECK(IG_DEV(dev_graph_launch)(d, graph) == IG_OK);
    CHECK(IG_DEV(dev_timer_stop)(d, &ms) == IG_OK);
    CHECKF(ms > 0 && ms < 10e3, "timer says %g ms", ms);
    fprintf(stderr, "gpu: 10 graph replays in %.3f ms\n", ms);

    IG_DEV(dev_graph_free)(graph);
    IG_DEV(dev_graph_free)(NULL);
    IG_DEV(dev_free_host)(d, pinned);
    dc_gemm_dev_free(d, &b);
    dc_gemm_free(&g);
    free(y);
    free(y_direct);
}

/* dev_stream_call's fn: keeps the stream it was given (RUN only). */
static int note_stream(void *user, void *stream, enum dev_call how)
{
    *(void **)user = how == DEV_CALL_RUN ? stream : NULL;
    return IG_OK;
}

int main(void)
{
    int count = IG_DEV(dev_count)();
    if (count == 0) {
        fprintf(stderr, "test_device_gpu: no CUDA device, skipped\n");
        return 77;
    }
    struct dev *d = NULL;
    fprintf(stderr, "(a missing-device line is expected next)\n");
    CHECK(IG_DEV(dev_open)(count, &d) == IG_E_DEVICE && d == NULL);
    CHECK(IG_DEV(dev_open)(0, &d) == IG_OK && d);
    if (!d)
        return test_summary("test_device_gpu");

    struct dev_info info;
    IG_DEV(dev_get_info)(d, &info);
    fprintf(stderr, "gpu: %s, cc %d.%d, %d SMs, %.1f of %.1f GiB free\n", info.name,
            info.cc_major, info.cc_minor, info.n_sm, info.mem_free / 1073741824.0,
            info.mem_total / 1073741824.0);
    CHECK(info.name[0] && info.cc_major >= 7 && info.n_sm > 0);
    CHECK(info.mem_total > 0 && info.mem_free <= info.mem_total);
    CHECK(IG_DEV(dev_stream)(d) != NULL);

    CHECK(IG_DEV(dev_stream_of)(d, DEV_STREAM_COPY) != NULL &&
          IG_DEV(dev_stream_of)(d, DEV_STREAM_COPY) != IG_DEV(dev_stream)(d));
    void *p2p = IG_DEV(dev_stream_of)(d, DEV_STREAM_P2P);
    CHECK(p2p != NULL && p2p != IG_DEV(dev_stream)(d) &&
          p2p != IG_DEV(dev_stream_of)(d, DEV_STREAM_COPY));
    /* a call on it runs now, given that stream (its work is the GPU's to order) */
    void *seen = NULL;
    CHECK(IG_DEV(dev_stream_call)(d, DEV_STREAM_P2P, note_stream, &seen) == IG_OK && seen == p2p);
    dc_check_memory(d);
    dc_check_absurd_alloc(d);
    dc_check_events(d);
    /* f32 accumulation in an unknown order, possibly truncating (tensor
     * cores): (cols + 2) roundings of 2^-23 per addend */
    dc_check_gemms(d, 0x1p-23, "gpu");
    check_graph(d);

    IG_DEV(dev_close)(d);
    IG_DEV(dev_close)(NULL);
    return test_summary("test_device_gpu");
}
