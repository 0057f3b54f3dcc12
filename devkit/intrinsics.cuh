/* devkit/intrinsics.cuh: the only way ignite's kernels reach tensor cores,
 * ldmatrix, cp.async, warp shuffles and the block barrier.
 *
 * On the device (__CUDA_ARCH__) each wrapper is the PTX instruction (sm_80+);
 * in host builds (IG_EMU) it calls the emulator, which implements the PTX
 * semantics (emu/warp.cc, emu/smem.cc). Layouts and facts:
 * /work/shared/notes/ptx-fragments.md. Elements are raw 16-bit patterns; a
 * tag type (ig_bf16_t / ig_f16_t) picks the format.
 * Covered by tests/emu/test_emu_warp.cc and every emulated kernel test. */
#ifndef IGNITE_DEVKIT_INTRINSICS_CUH
#define IGNITE_DEVKIT_INTRINSICS_CUH

#include "devkit/kernel.cuh"

#include <math.h>
#include <string.h>

#if defined(IG_EMU)
#include "core/half.h"
#endif

struct ig_bf16_t {}; /* bfloat16 elements */
struct ig_f16_t {};  /* IEEE binary16 elements */

/* ---- barrier -------------------------------------------------------------- */

#if defined(__CUDACC__)
#define ig_syncthreads() __syncthreads()
#else
#define ig_syncthreads() ig_emu_barrier(__FILE__, __LINE__)
#endif

/* griddepcontrol.wait: returns once the kernels this grid depends on have
 * completed and their writes are visible. A kernel launched with
 * IG_LAUNCH_PDL calls it before reading what they wrote, in every block
 * (a grid none of whose blocks waited could complete before the kernel it
 * depends on, and the next kernel's wait would no longer cover that one);
 * launched plainly (or below sm_90) it returns at once. Emulated, a
 * dependent launch's block meets here (emu/emu.h, ig_emu_next_launch_pdl). */
__device__ __forceinline__ void ig_grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_grid_dependency_wait();
#endif
}

/* griddepcontrol.launch_dependents: the next kernel on the stream, if
 * launched with IG_LAUNCH_PDL, may start once every block of this grid has
 * executed it or exited; its blocks then do what needs nothing of ours
 * (load their weights) and wait for our end in ig_grid_dependency_wait.
 * Where it is called changes only when they start, never what they read. */
__device__ __forceinline__ void ig_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_launch_dependents();
#endif
}

/* ---- the last block of a group (a ticket per group) ------------------------ */

/* The pattern of a kernel whose last block to finish a piece of work does
 * what needs all of it (the split-KV combine in the last split): each block
 * writes its part, ig_threadfence(), a barrier, one thread takes a ticket
 * with ig_atomic_add_u32; the block that draws the last number fences again
 * and reads the others' parts with ig_ld_cg_f32 (from L2: another SM's
 * writes are not in this SM's L1), then puts the counter back to 0. The
 * emulator runs blocks one after another, so there these are plain memory
 * operations (and the last block is always the last launched of its group). */
__device__ __forceinline__ void ig_threadfence()
{
#if defined(__CUDA_ARCH__)
    __threadfence();
#endif
}

/* atomicAdd on a global counter; returns the old value. */
__device__ __forceinline__ uint32_t ig_atomic_add_u32(uint32_t *p, uint32_t v)
{
#if defined(__CUDA_ARCH__)
    return atomicAdd(p, v);
#else
    const uint32_t old = *p;
    *p = old + v;
    return old;
#endif
}

/* A float of global memory that other blocks of this grid wrote (ld.global.cg). */
__device__ __forceinline__ float ig_ld_cg_f32(const float *p)
{
#if defined(__CUDA_ARCH__)
    return __ldcg(p);
#else
    return *p;
#endif
}

/* Four int32 at p (16-byte aligned, global memory the kernel does not
 * write) read anew at each call, like ig_thread_index_fresh: what derives
 * from them is recomputed where used instead of held in registers across a
 * loop (a warp-specialized producer has 24). */
__device__ __forceinline__ void ig_ld_fresh_v4(const int32_t *p, int32_t (&v)[4])
{
#if defined(__CUDA_ARCH__)
    asm volatile("ld.global.nc.v4.s32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "l"(p));
#else
    memcpy(v, p, sizeof v);
#endif
}

/* One int32 at p (global memory the kernel does not write) read anew at
 * each call (see ig_ld_fresh_v4). */
__device__ __forceinline__ int32_t ig_ld_fresh_s32(const int32_t *p)
{
#if defined(__CUDA_ARCH__)
    int32_t v;
    asm volatile("ld.global.nc.s32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
#else
    return *p;
#endif
}

/* threadIdx.x read anew at each call: values derived from it are then
 * recomputed where used (a few integer instructions) instead of being hoisted
 * out of a loop and kept in registers the accumulators need. */
__device__ __forceinline__ int ig_thread_index_fresh()
{
#if defined(__CUDA_ARCH__)
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
#else
    return (int)threadIdx.x;
#endif
}

/* gridDim.x read anew at each call (see ig_thread_index_fresh): a
 * warp-specialized producer's loop, at 32 registers, spilled it when it
 * was read once and held. */
__device__ __forceinline__ int ig_grid_size_fresh()
{
#if defined(__CUDA_ARCH__)
    int n;
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(n));
    return n;
#else
    return (int)gridDim.x;
#endif
}

/* ---- format conversion ---------------------------------------------------- */

/* Two floats rounded to nearest even and packed: lo in bits 15:0. */
template <class T> __device__ __forceinline__ uint32_t ig_pack2(float lo, float hi);

template <> __device__ __forceinline__ uint32_t ig_pack2<ig_bf16_t>(float lo, float hi)
{
#if defined(__CUDA_ARCH__)
    uint32_t r;
    /* cvt puts its FIRST source in the upper half. */
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#elif defined(__CUDACC__)
    return 0; /* host pass of nvcc: never called */
#else
    return (uint32_t)ig_f32_to_bf16(lo) | (uint32_t)ig_f32_to_bf16(hi) << 16;
#endif
}

template <> __device__ __forceinline__ uint32_t ig_pack2<ig_f16_t>(float lo, float hi)
{
#if defined(__CUDA_ARCH__)
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#elif defined(__CUDACC__)
    return 0;
#else
    return (uint32_t)ig_f32_to_f16(lo) | (uint32_t)ig_f32_to_f16(hi) << 16;
#endif
}

__device__ __forceinline__ float ig_exp2(float x)
{
    return exp2f(x);
}

/* 2^x as the one MUFU.EX2 instruction (ex2.approx.ftz.f32: about 2 ulp,
 * results below 2^-126 flushed to 0). exp2f wraps the same instruction in a
 * 3-instruction range fix-up for denormal results, which costs issue slots
 * in a softmax. The emulator computes exp2f (it differs only on those tiny
 * results). */
__device__ __forceinline__ float ig_exp2_approx(float x)
{
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

/* ---- mma.sync m16n8k16, f32 accumulate ------------------------------------ */

/* d = a * b + c for a 16x16 A (4 regs), a 16x8 B (2 regs) and 16x8 f32 C/D
 * (4 regs) in the PTX fragment layout; d may alias c. All 32 lanes. */
template <class T>
__device__ __forceinline__ void ig_mma_16816(float d[4], const uint32_t a[4],
                                             const uint32_t b[2], const float c[4]);

template <>
__device__ __forceinline__ void ig_mma_16816<ig_bf16_t>(float d[4], const uint32_t a[4],
                                                        const uint32_t b[2], const float c[4])
{
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif !defined(__CUDACC__)
    ig_emu_mma_16816(IG_EMU_MMA_BF16, d, a, b, c);
#endif
}

template <>
__device__ __forceinline__ void ig_mma_16816<ig_f16_t>(float d[4], const uint32_t a[4],
                                                       const uint32_t b[2], const float c[4])
{
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif !defined(__CUDACC__)
    ig_emu_mma_16816(IG_EMU_MMA_F16, d, a, b, c);
#endif
}

/* ---- ldmatrix ------------------------------------------------------------- */

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ uint32_t ig_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

/* Lane 8m+r passes the 16-byte-aligned shared address of row r of 8x8 matrix
 * m; register m receives that matrix's fragment (.trans: transposed). */
__device__ __forceinline__ void ig_ldmatrix_x1(uint32_t r[1], const void *row)
{
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(r[0]) : "r"(ig_smem_addr(row)));
#elif !defined(__CUDACC__)
    ig_emu_ldmatrix(1, 0, r, row);
#endif
}

__device__ __forceinline__ void ig_ldmatrix_x2(uint32_t r[2], const void *row)
{
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ig_smem_addr(row)));
#elif !defined(__CUDACC__)
    ig_emu_ldmatrix(2, 0, r, row);
#endif
}

__device__ __forceinline__ void ig_ldmatrix_x4(uint32_t r[4], const void *row)
{
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ig_smem_addr(row)));
#elif !defined(__CUDACC__)
    ig_emu_ldmatrix(4, 0, r, row);
#endif
}

__device__ __forceinline__ void ig_ldmatrix_x1_trans(uint32_t r[1], const void *row)
{
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
                 : "=r"(r[0]) : "r"(ig_smem_addr(row)));
#elif !defined(__CUDACC__)
    ig_emu_ldmatrix(1, 1, r, row);
#endif
}

__device__ __forceinline__ void ig_ldmatrix_x2_trans(uint32_t r[2], const void *row)
{
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(ig_smem_addr(row)));
#elif !defined(__CUDACC__)
    ig_emu_ldmatrix(2, 1, r, row);
#endif
}

__device__ __forceinline__ void ig_ldmatrix_x4_trans(uint32_t r[4], const void *row)
{
#if defined(__CUDA_ARCH__)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ig_smem_addr(row)));
#elif !defined(__CUDACC__)
    ig_emu_ldmatrix(4, 1, r, row);
#endif
}

/* ---- cp.async ------------------------------------------------------------- */

/* Starts a 16-byte copy global -> shared (both 16-byte aligned). When !valid
 * the 16 bytes are zero-filled and nothing is read, but src must still be a
 * valid address (the ISA does not promise it is not dereferenced). */
__device__ __forceinline__ void ig_cp_async16(void *smem_dst, const void *gmem_src, bool valid)
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(ig_smem_addr(smem_dst)),
                 "l"(gmem_src), "r"(valid ? 16 : 0));
#elif !defined(__CUDACC__)
    ig_emu_cp_async16(smem_dst, gmem_src, valid ? 16u : 0u);
#endif
}

/* The same for 8 and 4 bytes (cp.async.ca: the .cg form takes 16 only),
 * both addresses aligned to the size: the quantized KV pool's pieces. */
__device__ __forceinline__ void ig_cp_async8(void *smem_dst, const void *gmem_src, bool valid)
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(ig_smem_addr(smem_dst)),
                 "l"(gmem_src), "r"(valid ? 8 : 0));
#elif !defined(__CUDACC__)
    ig_emu_cp_async(smem_dst, gmem_src, 8u, valid ? 8u : 0u);
#endif
}

__device__ __forceinline__ void ig_cp_async4(void *smem_dst, const void *gmem_src, bool valid)
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(ig_smem_addr(smem_dst)),
                 "l"(gmem_src), "r"(valid ? 4 : 0));
#elif !defined(__CUDACC__)
    ig_emu_cp_async(smem_dst, gmem_src, 4u, valid ? 4u : 0u);
#endif
}

/* Closes this thread's group of outstanding cp.async (possibly empty). */
__device__ __forceinline__ void ig_cp_async_commit()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;" ::: "memory");
#elif !defined(__CUDACC__)
    ig_emu_cp_async_commit();
#endif
}

/* Waits until at most N of this thread's groups are pending. Other threads'
 * copies need a barrier after their own waits before they are read. */
template <int N> __device__ __forceinline__ void ig_cp_async_wait()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif !defined(__CUDACC__)
    ig_emu_cp_async_wait(N);
#endif
}

/* ---- warp shuffles (full warp, width 32) ---------------------------------- */

__device__ __forceinline__ uint32_t ig_shfl_xor(uint32_t v, int lane_mask)
{
#if defined(__CUDA_ARCH__)
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#elif defined(__CUDACC__)
    return v;
#else
    return ig_emu_shfl(IG_EMU_SHFL_BFLY, 0xffffffffu, v, (uint32_t)lane_mask, 0x1fu);
#endif
}

__device__ __forceinline__ uint32_t ig_shfl_idx(uint32_t v, int src_lane)
{
#if defined(__CUDA_ARCH__)
    return __shfl_sync(0xffffffffu, v, src_lane);
#elif defined(__CUDACC__)
    return v;
#else
    return ig_emu_shfl(IG_EMU_SHFL_IDX, 0xffffffffu, v, (uint32_t)src_lane, 0x1fu);
#endif
}

/* Lane l gets lane l + delta's value (its own when l + delta > 31). */
__device__ __forceinline__ uint32_t ig_shfl_down(uint32_t v, int delta)
{
#if defined(__CUDA_ARCH__)
    return __shfl_down_sync(0xffffffffu, v, delta);
#elif defined(__CUDACC__)
    return v;
#else
    return ig_emu_shfl(IG_EMU_SHFL_DOWN, 0xffffffffu, v, (uint32_t)delta, 0x1fu);
#endif
}

__device__ __forceinline__ float ig_shfl_xor_f32(float v, int lane_mask)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    u = ig_shfl_xor(u, lane_mask);
    memcpy(&v, &u, 4);
    return v;
}

/* ---- warp votes (full warp) ----------------------------------------------- */

/* Whether pred holds in any lane of the warp (the same answer in every lane:
 * a branch on it is warp-uniform). */
__device__ __forceinline__ bool ig_vote_any(bool pred)
{
#if defined(__CUDA_ARCH__)
    return __any_sync(0xffffffffu, pred) != 0;
#elif defined(__CUDACC__)
    return pred;
#else
    return ig_emu_vote(IG_EMU_VOTE_ANY, 0xffffffffu, pred) != 0;
#endif
}

/* Bit l set when pred holds in lane l. */
__device__ __forceinline__ uint32_t ig_vote_ballot(bool pred)
{
#if defined(__CUDA_ARCH__)
    return __ballot_sync(0xffffffffu, pred);
#elif defined(__CUDACC__)
    return pred;
#else
    return ig_emu_vote(IG_EMU_VOTE_BALLOT, 0xffffffffu, pred);
#endif
}

/* ---- integer SIMD within a register --------------------------------------- */

/* c + the dot product of the four signed bytes of a and of b (dp4a.s32.s32). */
__device__ __forceinline__ int ig_dp4a(int a, int b, int c)
{
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) *
             (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}

/* Byte-wise a - b modulo 256 (no borrow between bytes): __vsub4. */
__device__ __forceinline__ uint32_t ig_vsub4(uint32_t a, uint32_t b)
{
#if defined(__CUDA_ARCH__)
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= ((((a >> (8 * i)) & 0xffu) - ((b >> (8 * i)) & 0xffu)) & 0xffu) << (8 * i);
    return r;
#endif
}

/* ---- plain shared-memory access ------------------------------------------- */

template <class T> __device__ __forceinline__ T ig_lds(const T *p)
{
#if defined(IG_EMU)
    ig_emu_shared_read(p, sizeof *p);
#endif
    return *p;
}

template <class T> __device__ __forceinline__ void ig_sts(T *p, T v)
{
#if defined(IG_EMU)
    ig_emu_shared_write(p, sizeof *p);
#endif
    *p = v;
}

#endif
