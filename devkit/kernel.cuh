/* devkit/kernel.cuh: the conventions that let one kernel source compile with
 * nvcc for the GPU and with a host C++ compiler for the emulator (emu/).
 *
 * A kernel source includes this and devkit/intrinsics.cuh and then:
 *   - declares static shared arrays with IG_SHARED(type, name, [dims]) and the
 *     dynamic area with IG_DYN_SHARED(type, name) (on the host they become
 *     per-block heap buffers);
 *   - touches shared memory only through the wrappers of intrinsics.cuh
 *     (cp.async, ldmatrix, ig_lds/ig_sts), so the emulator sees every access;
 *   - launches with IG_LAUNCH(kernel, grid, block, smem, stream, args...),
 *     which returns 0 or a failure (checked and reported on both sides), or
 *     IG_LAUNCH_PDL (programmatic dependent launch on sm_90+, the kernel
 *     calling ig_grid_dependency_wait first: devkit/intrinsics.cuh);
 *   - raises a kernel's shared memory past the 48 KiB default with
 *     IG_SMEM_OPTIN(kernel, dynamic bytes) before its launch;
 *   - cuts a grid.y that may pass IG_GRID_Y_MAX into launches;
 *   - checks every CUDA runtime call with IG_CUDA_CHECK (device builds).
 * IG_EMU is defined in host (emulator) builds, never under nvcc.
 * Covered by tests/emu (host) and the CUDA build (device). */
#ifndef IGNITE_DEVKIT_KERNEL_CUH
#define IGNITE_DEVKIT_KERNEL_CUH

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

/* Full unrolling of a loop over a register array (left rolled, the array is
 * indexed at run time and moves to the stack); nothing for the host compiler. */
#if defined(__CUDACC__)
#define IG_UNROLL _Pragma("unroll")
#else
#define IG_UNROLL
#endif

#if defined(__CUDACC__)

#include <cuda_runtime.h>

#define IG_SHARED(type, name, dims) __shared__ __align__(16) type name dims
#define IG_DYN_SHARED(type, name) extern __shared__ __align__(16) type name[]

/* Prints one line naming the failed statement, file:line and the device, and
 * returns IG_E_DEVICE. */
static inline int ig_cuda_fail(cudaError_t err, const char *stmt, const char *file, int line)
{
    int dev = -1;
    cudaGetDevice(&dev);
    return ig_error(IG_E_DEVICE, "CUDA error %s (%s) in `%s` at %s:%d (device %d)",
                    cudaGetErrorName(err), cudaGetErrorString(err), stmt, file, line, dev);
}

/* Evaluates a CUDA call; on failure reports it and returns IG_E_DEVICE from
 * the enclosing function. */
#define IG_CUDA_CHECK(call)                                                     \
    do {                                                                        \
        cudaError_t ig_err_ = (call);                                           \
        if (ig_err_ != cudaSuccess)                                             \
            return ig_cuda_fail(ig_err_, #call, __FILE__, __LINE__);            \
    } while (0)

/* The launch's own error (bad configuration, too much shared memory). */
static inline int ig_cuda_launched(const char *what, const char *file, int line)
{
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? 0 : ig_cuda_fail(err, what, file, line);
}

#define IG_LAUNCH(kernel, grid, block, smem, stream, ...)                       \
    (kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__),                \
     ig_cuda_launched(#kernel "<<<...>>>", __FILE__, __LINE__))

/* A launch with programmatic dependent launch (compute capability 9.0+): the
 * kernel's blocks may start before the previous kernel on the stream has
 * finished, so it must call ig_grid_dependency_wait() before it reads
 * anything that kernel wrote (work before that, such as loading weights,
 * overlaps the previous kernel's tail). Also in stream capture. */
template <class... Params, class... Args>
static inline cudaError_t ig_launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block,
                                        size_t smem, cudaStream_t stream, Args... args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* A block may have 48 KiB of shared memory, static and dynamic together,
 * unless its kernel's dynamic limit is raised first (CUDA runtime API,
 * cudaFuncSetAttribute: cudaFuncAttributeMaxDynamicSharedMemorySize plus
 * the static bytes up to cudaDevAttrMaxSharedMemoryPerBlockOptin); past it
 * the launch fails. Returns IG_E_DEVICE from the caller on failure.
 * Emulated, it tells the next launch (ig_emu_next_launch_smem_optin). */
#define IG_SMEM_OPTIN(kernel, bytes)                                            \
    IG_CUDA_CHECK(cudaFuncSetAttribute((kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                       (int)(bytes)))

/* The most blocks a grid's y takes (CUDA: 65535); past it the launch fails. */
#define IG_GRID_Y_MAX ((int64_t)65535)

#define IG_LAUNCH_PDL(kernel, grid, block, smem, stream, ...)                   \
    ig_cuda_check_launch(ig_launch_pdl(kernel, (grid), (block), (smem), (stream), __VA_ARGS__), \
                         #kernel " (programmatic dependent launch)", __FILE__, __LINE__)

/* IGNITE_PDL=1 on compute capability 9.0+: the kernels that wait for their
 * inputs (ig_grid_dependency_wait) go out with IG_LAUNCH_PDL (the GEMVs,
 * the decode attention, the embeddings, the element-wise kernels of
 * ops/gpu_elementwise.cu and ops/gpu_arch.cu, the prefill attention); off
 * by default until the GPU check has measured it (docs/gpu.md,
 * "Programmatic dependent launch"). Read once. */
static inline bool ig_pdl_on()
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("IGNITE_PDL");
        int dev = 0, major = 0;
        on = e && !strcmp(e, "1") && cudaGetDevice(&dev) == cudaSuccess &&
             cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ==
                 cudaSuccess &&
             major >= 9;
    }
    return on == 1;
}

static inline int ig_cuda_check_launch(cudaError_t err, const char *what, const char *file,
                                       int line)
{
    return err == cudaSuccess ? ig_cuda_launched(what, file, line)
                              : ig_cuda_fail(err, what, file, line);
}

#else /* host build: the emulator */

#define IG_EMU 1
#include "emu/emu.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
#define __grid_constant__
#define threadIdx ig_emu_threadIdx
#define blockIdx ig_emu_blockIdx
#define blockDim ig_emu_blockDim
#define gridDim ig_emu_gridDim
typedef ig_emu_dim3 dim3;
typedef void *cudaStream_t;

/* The address of a function-local static is the declaration's identity. */
#define IG_SHARED(type, name, dims)                                             \
    static char ig_shared_key_##name;                                           \
    type(&name) dims = *reinterpret_cast<type(*) dims>(                         \
        ig_emu_static_shared(&ig_shared_key_##name, sizeof(type dims)))
#define IG_DYN_SHARED(type, name) type *name = static_cast<type *>(ig_emu_dynamic_shared())

#define IG_LAUNCH(kernel, grid, block, smem, stream, ...)                       \
    (ig_emu_launch_fn((grid), (block), (smem), [&] { kernel(__VA_ARGS__); })    \
         ? ig_error(IG_E_INTERNAL, "emulated %s failed: %s", #kernel,           \
                    ig_emu_last_error())                                        \
         : 0)
/* The emulator runs launches one after another; a dependent launch's blocks
 * meet at ig_grid_dependency_wait, where what the previous kernel wrote may
 * be hidden until then (emu/emu.h, ig_emu_set_pdl_hooks). */
#define IG_LAUNCH_PDL(...) (ig_emu_next_launch_pdl(), IG_LAUNCH(__VA_ARGS__))
/* The emulator checks the 48 KiB default against the static and dynamic
 * bytes a block uses (emu/emu.h, ig_emu_next_launch_smem_optin). */
#define IG_SMEM_OPTIN(kernel, bytes)                                            \
    ((void)(kernel), ig_emu_next_launch_smem_optin((size_t)(bytes)))
/* The emulator's grid.y limit, 65535 unless a test lowers it (emu/emu.h,
 * ig_emu_set_max_grid_y): a launcher that cuts grid.y is tested small. */
#define IG_GRID_Y_MAX ((int64_t)ig_emu_max_grid_y())
/* Emulated, IGNITE_PDL=1 is read at every launch, so a test can run a
 * kernel both ways in one process. */
static inline bool ig_pdl_on()
{
    const char *e = getenv("IGNITE_PDL");
    return e && !strcmp(e, "1");
}

#endif

/* IG_LAUNCH_PDL under IGNITE_PDL=1 (ig_pdl_on), else IG_LAUNCH: for a kernel
 * whose every block waits (ig_grid_dependency_wait) before it reads or
 * writes anything an earlier kernel writes or reads. */
#define IG_LAUNCH_DEP(...) (ig_pdl_on() ? IG_LAUNCH_PDL(__VA_ARGS__) : IG_LAUNCH(__VA_ARGS__))
#endif
