/* device/device.h: the thin device layer under the CUDA backend: pick a
 * device, allocate, copy, synchronize, time, capture a graph, and the one
 * matrix product the backend does not write itself (cuBLAS).
 *
 * Two implementations with the same functions (devkit/dev_entry.h):
 * device_cuda.c over the CUDA runtime and cuBLAS, and device_emu.cc over
 * host memory, where "device" pointers are host pointers, the main stream
 * is synchronous (the other streams late, below), kernels run under the
 * emulator (emu/) and the GEMM is a plain CPU loop with the same rounding
 * contract. The backend's orchestration
 * (buffer sizes, offsets, kernel order, cache indexing) thus runs end to end
 * in CI. Every function returns IG_OK or an error status after one line on
 * stderr (IG_E_DEVICE for a device failure, IG_E_NOMEM when memory runs
 * out). Covered by tests/emu/test_device_emu.c and tests/gpu/. */
#ifndef IGNITE_DEVICE_DEVICE_H
#define IGNITE_DEVICE_DEVICE_H

#include "devkit/dev_entry.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dev;        /* an open device: its stream, BLAS handle, workspace */
struct dev_graph;  /* a captured sequence of launches, replayable */

struct dev_info {
    char name[128];      /* "NVIDIA H200", "emulator" */
    int index;
    int cc_major, cc_minor;
    int n_sm;
    size_t mem_total, mem_free; /* bytes */
};

/* Usable devices (0 when there is no driver, no device, or an error; never
 * prints). */
int IG_DEV(dev_count)(void);

/* Opens device `index`: sets it current, creates a stream and the BLAS
 * handle. IG_E_DEVICE, naming the index and the reason, when it is absent or
 * unusable. */
int IG_DEV(dev_open)(int index, struct dev **out);
void IG_DEV(dev_close)(struct dev *d);
void IG_DEV(dev_get_info)(const struct dev *d, struct dev_info *info);

/* The stream every launch of the backend goes to (a cudaStream_t). */
void *IG_DEV(dev_stream)(struct dev *d);

/* ---- more streams and events ----
 * DEV_STREAM_MAIN is dev_stream's, where every launch, copy and GEMM above
 * goes; DEV_STREAM_COPY is a second stream of the device for downloads that
 * overlap the main stream's work; DEV_STREAM_P2P a third, for transfers
 * between ranks (NCCL's sends and receives, dev_stream_call), which wait on
 * a peer and must hold up neither. Nothing orders them but events: a
 * stream waiting on an event, the host waiting on one. The emulator runs
 * the main stream's work at once and the others' as late as CUDA allows
 * (device_emu.cc), so a missing wait reads stale bytes there too; a
 * download queued before its stream has waited for the main stream's
 * latest work gives 0xff bytes there (it may run first), and a call so
 * queued is told it is stale (dev_stream_call). */
enum dev_stream_id { DEV_STREAM_MAIN, DEV_STREAM_COPY, DEV_STREAM_P2P };
struct dev_event; /* a point in one stream's work (a cudaEvent_t, no timing) */

/* The stream's handle (a cudaStream_t; NULL under the emulator). */
void *IG_DEV(dev_stream_of)(struct dev *d, enum dev_stream_id s);
/* An event that has recorded nothing yet (waiting on it returns at once).
 * Destroying NULL is fine. */
int IG_DEV(dev_event_create)(struct dev *d, struct dev_event **e);
void IG_DEV(dev_event_destroy)(struct dev *d, struct dev_event *e);
/* e marks the work queued on stream s so far (a later record replaces it;
 * waits already queued keep the point they saw). */
int IG_DEV(dev_event_record)(struct dev *d, enum dev_stream_id s, struct dev_event *e);
/* Work queued on stream s after this call starts once e's work is done. */
int IG_DEV(dev_stream_wait)(struct dev *d, enum dev_stream_id s, struct dev_event *e);
/* Returns once e's work is done (the host waits; reports a failed kernel). */
int IG_DEV(dev_event_sync)(struct dev *d, struct dev_event *e);
/* Device->host copy queued on stream s, returning at once: dst must be
 * dev_alloc_host memory (the emulator refuses other memory) and holds the
 * data once an event recorded after it is done; src must not be written
 * before then. */
int IG_DEV(dev_download_async)(struct dev *d, enum dev_stream_id s, void *dst, const void *src,
                               size_t bytes);

/* How a dev_stream_fn is called: to queue its work (RUN), to queue it on a
 * stream that had not waited for the main stream's latest work when the
 * call was queued (STALE: the emulator's word; on a GPU that work may not
 * be done when this runs, so what it reads should be garbage: send 0xff
 * bytes), or only to free user (DROP: the device closed first). */
enum dev_call { DEV_CALL_RUN, DEV_CALL_STALE, DEV_CALL_DROP };
/* Queues its work on `stream` (a cudaStream_t; NULL under the emulator),
 * frees user; IG_OK or an error status after one line. */
typedef int (*dev_stream_fn)(void *user, void *stream, enum dev_call how);
/* fn's work in stream s's order, for work that a library queues on a
 * stream itself (NCCL's calls). CUDA calls fn now, on the host, and the
 * GPU orders its work; the emulator, whose host is the device, calls fn
 * when its stream s reaches this point (as late as its downloads), so fn
 * reads and writes memory then. fn is called exactly once; the status is
 * fn's under CUDA, the emulator's queueing's otherwise (fn's own is
 * reported by the wait, sync or dev_streams_run that runs it). s is not
 * DEV_STREAM_MAIN. */
int IG_DEV(dev_stream_call)(struct dev *d, enum dev_stream_id s, dev_stream_fn fn, void *user);
/* Lets the other streams' queued work run, as a GPU runs it on its own
 * while the host does something else: nothing under CUDA. The emulator runs
 * every call and download queued so far (fn's first failure is returned):
 * call it where the host would otherwise idle or block on another process
 * (MPI), whose progress may wait on this device's transfers. */
int IG_DEV(dev_streams_run)(struct dev *d);

/* Device memory; *p is 256-byte aligned. IG_E_NOMEM names the bytes asked
 * for and those free. Freeing NULL is fine. */
int IG_DEV(dev_alloc)(struct dev *d, size_t bytes, void **p);
void IG_DEV(dev_free)(struct dev *d, void *p);

/* Page-locked host memory for copies that a graph replays and for
 * dev_download_async (NULL-safe free). */
int IG_DEV(dev_alloc_host)(struct dev *d, size_t bytes, void **p);
void IG_DEV(dev_free_host)(struct dev *d, void *p);

/* Copies on the stream, in stream order. The upload returns once src may be
 * reused; the download once dst holds the data. */
int IG_DEV(dev_upload)(struct dev *d, void *dst, const void *src, size_t bytes);
int IG_DEV(dev_download)(struct dev *d, void *dst, const void *src, size_t bytes);
/* Asynchronous host->device copy from page-locked memory (may be captured). */
int IG_DEV(dev_upload_async)(struct dev *d, void *dst, const void *src, size_t bytes);
int IG_DEV(dev_copy)(struct dev *d, void *dst, const void *src, size_t bytes); /* device->device */
int IG_DEV(dev_memset)(struct dev *d, void *p, int byte, size_t bytes);

/* Waits for everything queued on the stream; reports a failed kernel. */
int IG_DEV(dev_sync)(struct dev *d);

/* Milliseconds of device time between two points of the stream: call
 * dev_timer_start, queue work, then dev_timer_stop (synchronizes). */
int IG_DEV(dev_timer_start)(struct dev *d);
int IG_DEV(dev_timer_stop)(struct dev *d, double *ms);

/* Graph capture of the stream's launches between begin and end; replay with
 * dev_graph_launch. The emulator has no graphs: begin returns IG_E_DEVICE
 * without a message and callers run their launches directly instead. */
int IG_DEV(dev_graph_begin)(struct dev *d);
int IG_DEV(dev_graph_end)(struct dev *d, struct dev_graph **g);
int IG_DEV(dev_graph_launch)(struct dev *d, struct dev_graph *g);
void IG_DEV(dev_graph_free)(struct dev_graph *g);

/* The nodes a captured graph holds (kernels, copies, cuBLAS's own launches):
 * what one replay of it launches. */
int64_t IG_DEV(dev_graph_nodes)(const struct dev_graph *g);

/* Launches queued on the stream so far: the emulator counts every kernel it
 * runs and every device GEMM (one launch each; the emulated backend's CPU
 * twins of a product add theirs with dev_note_launch), so the difference
 * over a decode step is the node count its graph would have on a GPU. -1
 * over CUDA, which counts nodes of a graph instead (dev_graph_nodes). */
int64_t IG_DEV(dev_launches)(struct dev *d);
void IG_DEV(dev_note_launch)(struct dev *d);

/* y[t][r] = sum_c w[r][c] * x[t][c] + beta * y[t][r] for t < n, r < rows:
 * w f16 [rows][cols] row-major (a weight), x f16 [n][cols], y f32 [n][rows];
 * products of f16 inputs summed in f32 (cuBLAS, CUBLAS_COMPUTE_32F). beta is
 * 0 (y is overwritten, never read) or 1 (accumulate: a residual add).
 * ld_x / ld_y are the row strides of x and y in elements (>= cols / rows). */
int IG_DEV(dev_gemm_f16)(struct dev *d, const uint16_t *w, const uint16_t *x, float *y,
                         int64_t rows, int64_t cols, int64_t n, int64_t ld_x, int64_t ld_y,
                         float beta);

#ifdef __cplusplus
}
#endif

#endif
