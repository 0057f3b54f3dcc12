/* device/device_cuda.c: the device layer (device/device.h) over the CUDA
 * runtime and cuBLAS. One stream per open device; every launch, copy, timer
 * and GEMM goes to it, so a graph captured on it holds the whole sequence.
 * A second stream takes the downloads that overlap it (dev_download_async),
 * a third the transfers between ranks (dev_stream_call), ordered against it
 * by events only.
 * Every runtime and cuBLAS call is checked and a failure is reported in one
 * line naming the call, the error and the device.
 * Covered by tests/gpu/test_device_gpu.c (on a GPU); its emulated twin
 * device_emu.cc by tests/emu/test_device_emu.c. */
#include "device/device.h"

#include "core/status.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuBLAS needs a workspace of its own to be capturable in a graph (otherwise
 * it allocates one on the fly, which capture forbids). 32 MiB is what NVIDIA
 * recommends for Hopper. */
#define DEV_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

struct dev {
    int index;
    cudaStream_t stream;
    cudaStream_t copy_stream; /* DEV_STREAM_COPY */
    cudaStream_t p2p_stream;  /* DEV_STREAM_P2P */
    cublasHandle_t blas;
    void *workspace;
    cudaEvent_t t0, t1;
    int timer_running;
};

struct dev_graph {
    cudaGraphExec_t exec;
    int index;     /* the device, for messages */
    int64_t nodes; /* cudaGraphGetNodes of the captured graph */
};

/* One line naming the failed call and device; clears the runtime's
 * last-error slot so the next launch's check (IG_LAUNCH) does not report
 * this failure again. */
static int cuda_fail(cudaError_t err, const char *call, int index, int line)
{
    (void)cudaGetLastError();
    return ig_error(IG_E_DEVICE, "CUDA error %s (%s) in `%s` at %s:%d (device %d)",
                    cudaGetErrorName(err), cudaGetErrorString(err), call, __FILE__, line,
                    index);
}

static int blas_fail(cublasStatus_t st, const char *call, int index, int line)
{
    (void)cudaGetLastError();
    return ig_error(IG_E_DEVICE, "cuBLAS error %s (%s) in `%s` at %s:%d (device %d)",
                    cublasGetStatusName(st), cublasGetStatusString(st), call, __FILE__, line,
                    index);
}

/* Evaluate a runtime / cuBLAS call; on failure report it and return
 * IG_E_DEVICE from the enclosing function. */
#define CUDA_CHECK(index, call)                                                 \
    do {                                                                        \
        cudaError_t err_ = (call);                                              \
        if (err_ != cudaSuccess)                                                \
            return cuda_fail(err_, #call, (index), __LINE__);                   \
    } while (0)

#define BLAS_CHECK(index, call)                                                 \
    do {                                                                        \
        cublasStatus_t st_ = (call);                                            \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                       \
            return blas_fail(st_, #call, (index), __LINE__);                    \
    } while (0)

/* For void functions (frees): report and go on. */
#define CUDA_REPORT(index, call)                                                \
    do {                                                                        \
        cudaError_t err_ = (call);                                              \
        if (err_ != cudaSuccess)                                                \
            cuda_fail(err_, #call, (index), __LINE__);                          \
    } while (0)

int IG_DEV(dev_count)(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not an error here */
        return 0;
    }
    return count;
}

static int open_resources(struct dev *d)
{
    int i = d->index;
    CUDA_CHECK(i, cudaSetDevice(i));
    CUDA_CHECK(i, cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking));
    CUDA_CHECK(i, cudaStreamCreateWithFlags(&d->copy_stream, cudaStreamNonBlocking));
    CUDA_CHECK(i, cudaStreamCreateWithFlags(&d->p2p_stream, cudaStreamNonBlocking));
    CUDA_CHECK(i, cudaEventCreate(&d->t0));
    CUDA_CHECK(i, cudaEventCreate(&d->t1));
    CUDA_CHECK(i, cudaMalloc(&d->workspace, DEV_BLAS_WORKSPACE_BYTES));
    BLAS_CHECK(i, cublasCreate(&d->blas));
    BLAS_CHECK(i, cublasSetStream(d->blas, d->stream));
    BLAS_CHECK(i, cublasSetWorkspace(d->blas, d->workspace, DEV_BLAS_WORKSPACE_BYTES));
    BLAS_CHECK(i, cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH));
    return IG_OK;
}

int IG_DEV(dev_open)(int index, struct dev **out)
{
    *out = NULL;
    int count = IG_DEV(dev_count)();
    if (index < 0 || index >= count)
        return ig_error(IG_E_DEVICE, "CUDA device %d: not present (%d CUDA device%s found)",
                        index, count, count == 1 ? "" : "s");
    struct dev *d = calloc(1, sizeof *d);
    if (!d)
        return ig_error(IG_E_NOMEM, "out of host memory opening CUDA device %d", index);
    d->index = index;
    int rc = open_resources(d);
    if (rc != IG_OK) {
        IG_DEV(dev_close)(d);
        return rc;
    }
    *out = d;
    return IG_OK;
}

void IG_DEV(dev_close)(struct dev *d)
{
    if (!d)
        return;
    int i = d->index;
    if (d->stream)
        CUDA_REPORT(i, cudaStreamSynchronize(d->stream));
    if (d->copy_stream)
        CUDA_REPORT(i, cudaStreamSynchronize(d->copy_stream));
    if (d->p2p_stream)
        CUDA_REPORT(i, cudaStreamSynchronize(d->p2p_stream));
    if (d->blas) {
        cublasStatus_t st = cublasDestroy(d->blas);
        if (st != CUBLAS_STATUS_SUCCESS)
            blas_fail(st, "cublasDestroy(d->blas)", i, __LINE__);
    }
    if (d->workspace)
        CUDA_REPORT(i, cudaFree(d->workspace));
    if (d->t0)
        CUDA_REPORT(i, cudaEventDestroy(d->t0));
    if (d->t1)
        CUDA_REPORT(i, cudaEventDestroy(d->t1));
    if (d->stream)
        CUDA_REPORT(i, cudaStreamDestroy(d->stream));
    if (d->copy_stream)
        CUDA_REPORT(i, cudaStreamDestroy(d->copy_stream));
    if (d->p2p_stream)
        CUDA_REPORT(i, cudaStreamDestroy(d->p2p_stream));
    free(d);
}

void IG_DEV(dev_get_info)(const struct dev *d, struct dev_info *info)
{
    memset(info, 0, sizeof *info);
    info->index = d->index;
    struct cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, d->index);
    if (err == cudaSuccess) {
        size_t len = strnlen(prop.name, sizeof prop.name);
        if (len >= sizeof info->name)
            len = sizeof info->name - 1;
        memcpy(info->name, prop.name, len); /* info is zeroed: terminated */
        info->cc_major = prop.major;
        info->cc_minor = prop.minor;
        info->n_sm = prop.multiProcessorCount;
    } else {
        cuda_fail(err, "cudaGetDeviceProperties(&prop, d->index)", d->index, __LINE__);
        snprintf(info->name, sizeof info->name, "CUDA device %d", d->index);
    }
    err = cudaMemGetInfo(&info->mem_free, &info->mem_total);
    if (err != cudaSuccess) {
        cuda_fail(err, "cudaMemGetInfo(&info->mem_free, &info->mem_total)", d->index, __LINE__);
        info->mem_free = info->mem_total = 0;
    }
}

void *IG_DEV(dev_stream)(struct dev *d)
{
    return d->stream;
}

void *IG_DEV(dev_stream_of)(struct dev *d, enum dev_stream_id s)
{
    switch (s) {
    case DEV_STREAM_COPY: return d->copy_stream;
    case DEV_STREAM_P2P: return d->p2p_stream;
    default: return d->stream;
    }
}

/* fn queues its work on the stream itself (NCCL's calls return once queued):
 * the GPU runs it in the stream's order. */
int IG_DEV(dev_stream_call)(struct dev *d, enum dev_stream_id s, dev_stream_fn fn, void *user)
{
    return fn(user, IG_DEV(dev_stream_of)(d, s), DEV_CALL_RUN);
}

int IG_DEV(dev_streams_run)(struct dev *d)
{
    (void)d; /* (a GPU's streams progress on their own) */
    return IG_OK;
}

/* ---- events ---- */

int IG_DEV(dev_event_create)(struct dev *d, struct dev_event **e)
{
    cudaEvent_t ev = NULL;
    *e = NULL;
    /* no timing: recording and waiting cost less (cudaEventDisableTiming) */
    CUDA_CHECK(d->index, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *e = (struct dev_event *)ev;
    return IG_OK;
}

void IG_DEV(dev_event_destroy)(struct dev *d, struct dev_event *e)
{
    if (e)
        CUDA_REPORT(d->index, cudaEventDestroy((cudaEvent_t)e));
}

int IG_DEV(dev_event_record)(struct dev *d, enum dev_stream_id s, struct dev_event *e)
{
    CUDA_CHECK(d->index, cudaEventRecord((cudaEvent_t)e, IG_DEV(dev_stream_of)(d, s)));
    return IG_OK;
}

int IG_DEV(dev_stream_wait)(struct dev *d, enum dev_stream_id s, struct dev_event *e)
{
    CUDA_CHECK(d->index, cudaStreamWaitEvent(IG_DEV(dev_stream_of)(d, s), (cudaEvent_t)e, 0));
    return IG_OK;
}

int IG_DEV(dev_event_sync)(struct dev *d, struct dev_event *e)
{
    CUDA_CHECK(d->index, cudaEventSynchronize((cudaEvent_t)e));
    return IG_OK;
}

/* The out-of-memory report both allocators share. */
static int out_of_memory(int index, const char *what, size_t bytes)
{
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        (void)cudaGetLastError();
    return ig_error(IG_E_NOMEM, "CUDA device %d: out of %s memory: %zu bytes asked for, "
                    "%zu of %zu device bytes free", index, what, bytes, free_b, total_b);
}

int IG_DEV(dev_alloc)(struct dev *d, size_t bytes, void **p)
{
    *p = NULL;
    cudaError_t err = cudaMalloc(p, bytes);
    if (err == cudaErrorMemoryAllocation)
        return out_of_memory(d->index, "device", bytes);
    if (err != cudaSuccess)
        return cuda_fail(err, "cudaMalloc(p, bytes)", d->index, __LINE__);
    return IG_OK;
}

void IG_DEV(dev_free)(struct dev *d, void *p)
{
    if (p)
        CUDA_REPORT(d->index, cudaFree(p));
}

int IG_DEV(dev_alloc_host)(struct dev *d, size_t bytes, void **p)
{
    *p = NULL;
    cudaError_t err = cudaMallocHost(p, bytes);
    if (err == cudaErrorMemoryAllocation)
        return out_of_memory(d->index, "page-locked host", bytes);
    if (err != cudaSuccess)
        return cuda_fail(err, "cudaMallocHost(p, bytes)", d->index, __LINE__);
    return IG_OK;
}

void IG_DEV(dev_free_host)(struct dev *d, void *p)
{
    if (p)
        CUDA_REPORT(d->index, cudaFreeHost(p));
}

/* Synchronous on the stream: src may be pageable memory the caller reuses at
 * once (uploads are weights and prompts, off the hot path). */
int IG_DEV(dev_upload)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(d->index, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream));
    CUDA_CHECK(d->index, cudaStreamSynchronize(d->stream));
    return IG_OK;
}

int IG_DEV(dev_download)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(d->index, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream));
    CUDA_CHECK(d->index, cudaStreamSynchronize(d->stream));
    return IG_OK;
}

/* Asynchronous to the host only into page-locked memory: into pageable
 * memory the runtime returns once the copy is done (CUDA runtime API, "API
 * synchronization behavior"), hence dev_alloc_host's dst. */
int IG_DEV(dev_download_async)(struct dev *d, enum dev_stream_id s, void *dst, const void *src,
                               size_t bytes)
{
    CUDA_CHECK(d->index, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                         IG_DEV(dev_stream_of)(d, s)));
    return IG_OK;
}

int IG_DEV(dev_upload_async)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(d->index, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream));
    return IG_OK;
}

int IG_DEV(dev_copy)(struct dev *d, void *dst, const void *src, size_t bytes)
{
    CUDA_CHECK(d->index, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->stream));
    return IG_OK;
}

int IG_DEV(dev_memset)(struct dev *d, void *p, int byte, size_t bytes)
{
    CUDA_CHECK(d->index, cudaMemsetAsync(p, byte, bytes, d->stream));
    return IG_OK;
}

int IG_DEV(dev_sync)(struct dev *d)
{
    CUDA_CHECK(d->index, cudaStreamSynchronize(d->stream));
    return IG_OK;
}

int IG_DEV(dev_timer_start)(struct dev *d)
{
    CUDA_CHECK(d->index, cudaEventRecord(d->t0, d->stream));
    d->timer_running = 1;
    return IG_OK;
}

int IG_DEV(dev_timer_stop)(struct dev *d, double *ms)
{
    *ms = 0;
    if (!d->timer_running)
        return ig_error(IG_E_INTERNAL, "CUDA device %d: timer stopped without a start", d->index);
    d->timer_running = 0;
    float elapsed = 0;
    CUDA_CHECK(d->index, cudaEventRecord(d->t1, d->stream));
    CUDA_CHECK(d->index, cudaEventSynchronize(d->t1));
    CUDA_CHECK(d->index, cudaEventElapsedTime(&elapsed, d->t0, d->t1));
    *ms = elapsed;
    return IG_OK;
}

/* Global mode: any unsafe call (cudaMalloc, a synchronous copy) made during
 * the capture, from any thread, fails and invalidates it instead of being
 * silently left out of the graph. */
int IG_DEV(dev_graph_begin)(struct dev *d)
{
    CUDA_CHECK(d->index, cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeGlobal));
    return IG_OK;
}

/* Always ends the capture (even after a failed launch inside it), so the
 * stream is usable again whatever the result. */
int IG_DEV(dev_graph_end)(struct dev *d, struct dev_graph **g)
{
    *g = NULL;
    cudaGraph_t graph = NULL;
    CUDA_CHECK(d->index, cudaStreamEndCapture(d->stream, &graph));
    size_t nodes = 0;
    CUDA_CHECK(d->index, cudaGraphGetNodes(graph, NULL, &nodes));
    cudaGraphExec_t exec = NULL;
    cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaError_t err_destroy = cudaGraphDestroy(graph);
    if (err != cudaSuccess)
        return cuda_fail(err, "cudaGraphInstantiate(&exec, graph, 0)", d->index, __LINE__);
    struct dev_graph *out = malloc(sizeof *out);
    if (err_destroy != cudaSuccess || !out) {
        CUDA_REPORT(d->index, cudaGraphExecDestroy(exec));
        free(out);
        if (!out)
            return ig_error(IG_E_NOMEM, "out of host memory for a CUDA graph (device %d)",
                            d->index);
        return cuda_fail(err_destroy, "cudaGraphDestroy(graph)", d->index, __LINE__);
    }
    out->exec = exec;
    out->index = d->index;
    out->nodes = (int64_t)nodes;
    *g = out;
    return IG_OK;
}

int IG_DEV(dev_graph_launch)(struct dev *d, struct dev_graph *g)
{
    CUDA_CHECK(d->index, cudaGraphLaunch(g->exec, d->stream));
    return IG_OK;
}

int64_t IG_DEV(dev_graph_nodes)(const struct dev_graph *g)
{
    return g ? g->nodes : -1;
}

int64_t IG_DEV(dev_launches)(struct dev *d)
{
    (void)d;
    return -1;
}

void IG_DEV(dev_note_launch)(struct dev *d)
{
    (void)d;
}

void IG_DEV(dev_graph_free)(struct dev_graph *g)
{
    if (!g)
        return;
    CUDA_REPORT(g->index, cudaGraphExecDestroy(g->exec));
    free(g);
}

/* Row-major y[n][rows] is column-major rows x n with ldc = ld_y, and
 * row-major w[rows][cols] is column-major cols x rows, so
 * y = op_T(w) * x in cuBLAS's column-major terms. */
int IG_DEV(dev_gemm_f16)(struct dev *d, const uint16_t *w, const uint16_t *x, float *y,
                         int64_t rows, int64_t cols, int64_t n, int64_t ld_x, int64_t ld_y,
                         float beta)
{
    if (rows < 0 || cols < 0 || n < 0 || rows > INT_MAX || cols > INT_MAX || n > INT_MAX ||
        ld_x < cols || ld_y < rows || ld_x > INT_MAX || ld_y > INT_MAX ||
        (beta != 0.0f && beta != 1.0f))
        return ig_error(IG_E_INTERNAL,
                        "dev_gemm_f16: bad shape rows %lld cols %lld n %lld ld_x %lld ld_y %lld "
                        "beta %g (device %d)", (long long)rows, (long long)cols, (long long)n,
                        (long long)ld_x, (long long)ld_y, (double)beta, d->index);
    if (rows == 0 || n == 0)
        return IG_OK;
    const float alpha = 1.0f;
    /* cuBLAS wants leading dimensions >= 1 even for an empty k. */
    int lda = cols > 0 ? (int)cols : 1, ldb = ld_x > 0 ? (int)ld_x : 1;
    BLAS_CHECK(d->index, cublasGemmEx(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)n,
                                      (int)cols, &alpha, w, CUDA_R_16F, lda, x, CUDA_R_16F, ldb,
                                      &beta, y, CUDA_R_32F, (int)ld_y, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
    return IG_OK;
}
