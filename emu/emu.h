/* emu/emu.h: runs a CUDA kernel's grid on the CPU, so the kernel source that
 * ships is exercised in CI on machines without a GPU.
 *
 * Blocks run one after another. The threads of a block are cooperative fibers
 * that switch at barriers, waits and warp collectives. Warp collectives (mma,
 * ldmatrix, shfl) are computed once all 32 lanes have arrived, with the PTX
 * fragment layouts (docs: ../shared/notes/ptx-fragments.md, restated in
 * emu/warp.cc); wgmma is a warpgroup collective of 128 threads computed at
 * its wait_group (emu/wgmma.cc, docs/wgmma.md). cp.async copies land at the
 * wait that covers them, not at issue; TMA loads (cp.async.bulk.tensor) land
 * as late as they can, when no thread can run (emu/tma.cc). Named barriers,
 * mbarriers (phases, tx-count) and setmaxnreg follow the PTX ISA
 * (emu/sync.cc, docs/wgmma.md). Shared memory is one exact-size heap buffer
 * per declaration and block (so ASan sees overruns) with a shadow that
 * reports races (accesses not ordered by happens-before, which vector clocks
 * follow through every barrier, named barrier, mbarrier phase and wgmma
 * wait), reads of uninitialised bytes and of copies still in flight. The
 * order in which threads leave a barrier is shuffled by a seed. A barrier,
 * wait or collective that cannot complete is reported, never a hang.
 *
 * Kernel sources do not include this header themselves: devkit/kernel.cuh and
 * devkit/intrinsics.cuh map CUDA's names onto it in host builds.
 * Not thread-safe: one launch at a time per process.
 * Covered by tests/emu/test_emu_*.cc. */
#ifndef IGNITE_EMU_EMU_H
#define IGNITE_EMU_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "emu/pdl_hooks.h"

#include <type_traits>

struct ig_emu_dim3 {
    unsigned x, y, z;
    constexpr ig_emu_dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
        : x(x_), y(y_), z(z_) {}
};

/* What threadIdx/blockIdx/blockDim/gridDim read in an emulated kernel. The
 * scheduler sets them before it switches into a thread. */
extern ig_emu_dim3 ig_emu_threadIdx, ig_emu_blockIdx, ig_emu_blockDim, ig_emu_gridDim;

/* ---- launching ----------------------------------------------------------- */

typedef void (*ig_emu_kernel_fn)(void *ctx);

/* Runs fn(ctx) once per thread of every block of `grid`, with `dyn_smem`
 * bytes of dynamic shared memory per block. Returns 0 when every thread of
 * every block ran to its end without a reported fault, else -1 with the first
 * fault in ig_emu_last_error() (and printed on stderr); the launch stops at
 * the first fault. */
int ig_emu_launch(ig_emu_dim3 grid, ig_emu_dim3 block, size_t dyn_smem,
                  ig_emu_kernel_fn fn, void *ctx);

/* The next launch is a programmatic dependent launch (IG_LAUNCH_PDL's host
 * side): the kernel's blocks behave as if they started before the previous
 * kernel on the stream had finished. Each block's threads meet at
 * ig_grid_dependency_wait (griddepcontrol.wait); the hooks below model what
 * the previous kernel writes as absent until then. A block whose threads all
 * exit without waiting is a fault: on a GPU such a grid may complete before
 * the kernel it depends on, and a kernel waiting on it would then read that
 * kernel's outputs unfinished. */
void ig_emu_next_launch_pdl(void);

/* The next launch raised its kernel's dynamic shared memory limit to bytes
 * (cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize):
 * IG_SMEM_OPTIN's host side). Without it a block's static and dynamic
 * shared memory together may not pass 48 KiB, the default a block gets:
 * the launch fails on a GPU (cudaErrorInvalidValue) while the dynamic
 * bytes alone fit. Emulated the raise lasts one launch (on a GPU it stays
 * with the kernel), so each launch that needs it says so. A launch whose
 * dynamic bytes alone pass 48 KiB is not checked: its launcher may raise
 * the limit unseen (cudaFuncSetAttribute under __CUDACC__ only). */
void ig_emu_next_launch_smem_optin(size_t bytes);

/* What its blocks see before they wait: emu/pdl_hooks.h (C and C++). */

/* Launches made since the process started (failed ones too): what a CUDA
 * graph of the same launches would hold as kernel nodes (device/device_emu.cc's
 * dev_launches). */
uint64_t ig_emu_launches(void);

/* The same for a callable, typically [&] { kernel(args...); }. */
template <class F>
static inline int ig_emu_launch_fn(ig_emu_dim3 grid, ig_emu_dim3 block, size_t dyn_smem,
                                   F &&f)
{
    using Fn = typename std::remove_reference<F>::type;
    return ig_emu_launch(
        grid, block, dyn_smem, [](void *c) { (*static_cast<Fn *>(c))(); },
        const_cast<void *>(static_cast<const void *>(&f)));
}

/* Seed for the thread order at block start and at every barrier and
 * collective release (0 keeps launch order), and for the shared address of
 * the dynamic area (ig_emu_shared_address). Default 1. */
void ig_emu_set_seed(uint64_t seed);

/* The first fault of the last failed launch ("" after a clean one). */
const char *ig_emu_last_error(void);

/* When quiet, faults are only recorded, not printed (for tests that provoke
 * them on purpose). */
void ig_emu_set_quiet(int quiet);

/* Counters of the last launch, for tests and curiosity. */
struct ig_emu_stats {
    uint64_t blocks;      /* blocks run */
    uint64_t switches;    /* fiber switches into a thread */
    uint64_t barriers;    /* barrier releases */
    uint64_t collectives; /* warp collectives computed */
    /* Extra shared-memory wavefronts of ldmatrix: per 8x8 matrix (one phase
     * of 8 rows x 16 bytes), how many rows beyond one share a 16-byte bank
     * group ((offset / 16) % 8, allocations being 128-byte aligned). 0 for a
     * conflict-free layout. */
    uint64_t ldmatrix_conflicts;
    uint64_t mbarrier_phases; /* mbarrier phases completed */
    uint64_t tma_loads;       /* TMA loads completed */
    uint64_t tma_stores;      /* TMA stores completed */
    uint64_t named_barriers;  /* named barrier instances completed */
    uint64_t griddep_waits;   /* blocks of a dependent launch that met at the wait */
    uint64_t triggers;        /* griddepcontrol.launch_dependents executed (threads) */
};
struct ig_emu_stats ig_emu_last_stats(void);

/* ---- hooks the devkit wrappers call (host builds only) -------------------- */

enum ig_emu_mma_kind { IG_EMU_MMA_BF16 = 1, IG_EMU_MMA_F16 = 2 };
enum ig_emu_shfl_mode { IG_EMU_SHFL_UP, IG_EMU_SHFL_DOWN, IG_EMU_SHFL_BFLY, IG_EMU_SHFL_IDX };
enum ig_emu_vote_mode { IG_EMU_VOTE_ANY, IG_EMU_VOTE_ALL, IG_EMU_VOTE_BALLOT };

/* Per-block storage of the static __shared__ declaration identified by key
 * (the address of a static in the declaring function); same size every call. */
void *ig_emu_static_shared(const void *key, size_t bytes);
/* The block's dynamic shared memory (launch's dyn_smem bytes). */
void *ig_emu_dynamic_shared(void);

/* __syncthreads(); where = call site for messages. */
void ig_emu_barrier(const char *file, int line);
/* griddepcontrol.wait: returns at once in a plain launch; in a programmatic
 * dependent launch the block's threads meet here (ig_emu_next_launch_pdl). */
void ig_emu_grid_dependency_wait(void);
/* griddepcontrol.launch_dependents: counted (nothing runs concurrently here). */
void ig_emu_launch_dependents(void);

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (d may alias c). */
void ig_emu_mma_16816(int kind, float d[4], const uint32_t a[4], const uint32_t b[2],
                      const float c[4]);
/* ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16: r gets num registers. */
void ig_emu_ldmatrix(int num, int trans, uint32_t *r, const void *row);
/* shfl.sync.{mode}.b32 with operands b and c as in PTX; only the full mask. */
uint32_t ig_emu_shfl(int mode, uint32_t mask, uint32_t v, uint32_t b, uint32_t c);
/* vote.sync.{any,all,ballot} over the full warp: any/all give 0 or 1, ballot
 * the mask of lanes whose pred is set. */
uint32_t ig_emu_vote(int mode, uint32_t mask, int pred);

/* wgmma: warpgroup collectives (the 128 threads of 4 consecutive warps
 * starting at a multiple of 4). ig_emu_wgmma is wgmma.mma_async.m64n{n}k16
 * with f32 accumulators: d = this thread's n/2 accumulators; A from the
 * descriptor a_desc when a_regs is NULL, else this thread's 4 registers;
 * B from b_desc; trans_a/trans_b 0 = K-major, 1 = M-/N-major. It is only
 * recorded at issue: operands are read from shared memory and d written at
 * the ig_emu_wgmma_wait that completes its group (as PTX allows), so a
 * kernel that reads d early or overwrites operands early gets wrong numbers.
 * Its operands are checked at issue and at completion; it needs a preceding
 * ig_emu_wgmma_fence unless its registers are as a wgmma left them; d must
 * not be written until its wait. Descriptor addresses are
 * ig_emu_shared_address values. */
enum ig_emu_wgmma_kind { IG_EMU_WGMMA_BF16 = 1, IG_EMU_WGMMA_F16 = 2 };
void ig_emu_wgmma(int kind, int n, float *d, uint64_t a_desc, const uint32_t *a_regs,
                  uint64_t b_desc, int accumulate, int trans_a, int trans_b);
void ig_emu_wgmma_fence(void);
void ig_emu_wgmma_commit(void);
void ig_emu_wgmma_wait(int n);
/* fence.proxy.async.shared::cta by this thread. */
void ig_emu_fence_proxy_async(void);
/* p's .shared::cta address: its offset in the block's dynamic shared memory
 * plus a per-launch base, a multiple of 16 but never of 1024, from the seed
 * (a fault when p is not in that memory). */
uint32_t ig_emu_shared_address(const void *p);

/* cp.async.cg.shared.global [dst], [src], 16, src_size (src_size 0 or 16). */
void ig_emu_cp_async16(void *dst, const void *src, uint32_t src_size);
/* cp.async of `size` bytes (4, 8 or 16), src_size 0 or size. */
void ig_emu_cp_async(void *dst, const void *src, uint32_t size, uint32_t src_size);
void ig_emu_cp_async_commit(void);
void ig_emu_cp_async_wait(int n);

/* A plain shared-memory access of n bytes at p (checked against the shadow;
 * the caller then does the access itself). */
void ig_emu_shared_read(const void *p, size_t n);
void ig_emu_shared_write(const void *p, size_t n);

/* ---- synchronization beyond __syncthreads (emu/sync.cc) ------------------- */

/* bar.sync id, count (wait = 1) or bar.arrive id, count (wait = 0): named
 * barrier id 1..15 (0 is __syncthreads'), count a multiple of 32; the
 * barrier completes when count threads have arrived; bar.sync waits for
 * that and then is ordered after every arriver's earlier accesses. */
void ig_emu_named_barrier(int id, int count, int wait, const char *file, int line);
/* __syncwarp() over the full warp: its lanes' earlier accesses are ordered
 * before their later ones. */
void ig_emu_syncwarp(void);
/* mbarrier.init.shared::cta.b64 [bar], count (bar: 8 bytes of the dynamic
 * shared memory, 8-byte aligned; count 1 .. 2^20 - 1). */
void ig_emu_mbarrier_init(void *bar, uint32_t count);
/* mbarrier.arrive[.expect_tx].shared::cta.b64 _, [bar] (, tx): tx-count
 * += tx first, then one arrival (release). */
void ig_emu_mbarrier_arrive(void *bar, uint32_t tx);
/* mbarrier.try_wait.parity.shared::cta.b64 in a loop: returns once the phase
 * with this parity has completed (acquire), i.e. at once when the current
 * phase's parity differs from `parity`. */
void ig_emu_mbarrier_wait(void *bar, uint32_t parity);
/* fence.mbarrier_init.release.cluster: this thread's mbarrier.init are
 * visible to the async proxy (TMA's complete_tx). */
void ig_emu_fence_mbarrier_init(void);
/* setmaxnreg.{inc,dec}.sync.aligned.u32 regs, a warpgroup collective;
 * launch_regs = the kernel's registers per thread at launch (its
 * __launch_bounds__ limit), the same in every call of a launch. */
void ig_emu_setmaxnreg(int inc, int regs, int launch_regs);

/* ---- TMA (emu/tma.cc) ----------------------------------------------------- */

/* A tensor map as the emulator keeps it, inside the 128 bytes of a CUtensorMap
 * (devkit/tma.cuh's ig_tma_map). Tiled mode, no interleave, elements of
 * elem_bytes, dims and strides innermost first (strides in bytes,
 * stride[0] = elem_bytes), boxes of box[] elements, swizzle 0 none or 3
 * 128B (CUtensorMapSwizzle numbering), out-of-bound elements read as 0. */
struct ig_emu_tma_map {
    uint32_t magic;
    uint32_t rank, elem_bytes, swizzle;
    const void *base;
    uint64_t dim[5], stride[5];
    uint32_t box[5];
};
/* Fills *m with the driver's checks (cuTensorMapEncodeTiled's requirements,
 * cuda.h); returns 0, or -1 after printing which one failed. */
int ig_emu_tma_encode(struct ig_emu_tma_map *m, const void *base, int rank, int elem_bytes,
                      const uint64_t *dim, const uint64_t *stride_bytes, const uint32_t *box,
                      int swizzle);
/* cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes
 * [dst], [map, coords], [bar]: issued now, lands (complete_tx on bar) later. */
void ig_emu_tma_load(const void *map, void *dst, const int32_t *coords, void *bar);
/* cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, coords], [src]. */
void ig_emu_tma_store(const void *map, const void *src, const int32_t *coords);
/* cp.async.bulk.commit_group and cp.async.bulk.wait_group[.read] n. */
void ig_emu_bulk_commit(void);
void ig_emu_bulk_wait(int n, int read_only);

/* The number of SMs a persistent kernel sizes its grid by (default 3, so a
 * block runs several work items). */
void ig_emu_set_sm_count(int n);
int ig_emu_sm_count(void);

/* The most blocks on grid.y (CUDA's 65535, the default; 0 restores it): a
 * test lowers it so a launcher that cuts its grid.y into launches
 * (IG_GRID_Y_MAX, devkit/kernel.cuh) cuts a small grid, and a launch past
 * it faults. */
void ig_emu_set_max_grid_y(unsigned n);
unsigned ig_emu_max_grid_y(void);

#endif
