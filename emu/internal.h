/* emu/internal.h: the emulator's state shared by its files (scheduler, shared
 * memory and its race detector, warp and warpgroup collectives,
 * synchronization objects, TMA). Not for kernels or tests. */
#ifndef IGNITE_EMU_INTERNAL_H
#define IGNITE_EMU_INTERNAL_H

#include "emu/emu.h"
#include "emu/fiber.h"

#include <deque>
#include <map>
#include <vector>

/* On the emulator's own bookkeeping in its hottest loops (the shadow of
 * shared memory, vector clocks, the arrival at collectives, the products of
 * mma and wgmma on copies): no ASan or UBSan instrumentation there, as these
 * loops touch only the emulator's data (shadow entries, clocks, copies),
 * never a kernel's memory; a kernel's accesses keep every check (its code
 * and the emulator's copies to and from kernel memory stay instrumented).
 * The instrumentation took about half the time of these loops and kept the
 * compiler from vectorizing them. */
#define EMU_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

enum emu_state {
    EMU_RUNNABLE,
    EMU_AT_BARRIER,   /* __syncthreads */
    EMU_AT_WARP,      /* a warp collective */
    EMU_AT_WARPGROUP, /* a warpgroup collective (wgmma, setmaxnreg) */
    EMU_AT_NBAR,      /* bar.sync on a named barrier */
    EMU_AT_MBAR,      /* mbarrier.try_wait.parity */
    EMU_AT_GRIDDEP,   /* griddepcontrol.wait in a programmatic dependent launch */
    EMU_DONE
};
enum emu_op { EMU_OP_MMA = 1, EMU_OP_LDSM, EMU_OP_SHFL, EMU_OP_VOTE, EMU_OP_SYNCWARP };

/* What a lane brings to a warp collective. */
struct emu_coll {
    int op, kind;          /* emu_op; mma kind, ldmatrix num|trans<<4, shfl/vote mode */
    const void *in[3];     /* mma: a, b, c; ldmatrix: row address */
    void *out;             /* mma: d; ldmatrix: registers; shfl, vote: result */
    uint32_t v, b, c, mask; /* shfl operands; vote: v = the predicate */
};

/* What a thread brings to a warpgroup collective (wgmma and its fence,
 * commit, wait; setmaxnreg). */
enum emu_wg_op { EMU_WG_MMA = 1, EMU_WG_FENCE, EMU_WG_COMMIT, EMU_WG_WAIT, EMU_WG_SETMAXNREG };
struct emu_wgcoll {
    int op, kind, n;          /* emu_wg_op; mma: kind and N; wait: groups kept;
                                 setmaxnreg: kind = 1 inc / 0 dec, n = registers */
    int accumulate, trans_a, trans_b, a_in_regs;
    int launch_regs;          /* setmaxnreg: the kernel's registers per thread at launch */
    uint64_t a_desc, b_desc;
    float *d;                 /* this thread's n/2 accumulators */
    const uint32_t *a_ptr;    /* A registers (NULL: A from shared memory) */
    uint32_t a[4];            /* A registers, copied at issue */
};

/* One issued wgmma of a warpgroup, waiting for its wait_group. */
struct emu_wgmma_op {
    int kind, n, accumulate, trans_a, trans_b, a_in_regs;
    uint64_t a_desc, b_desc;
    float *d[128];            /* per thread of the warpgroup */
    uint32_t a[128][4];       /* A registers at issue (a_in_regs) ... */
    const uint32_t *a_ptr[128]; /* ... and where they are: unchanged until completion */
    /* What each thread's accumulators must hold at completion: the values at
     * issue, updated when an earlier MMA on the same registers completes
     * (128 x n/2 bits; a difference means the thread wrote them meanwhile). */
    std::vector<uint32_t> d_expect;
    /* The happens-before of its shared-memory reads: the join of the
     * warpgroup's clocks at issue, with the warpgroup's wgmma agent at a
     * fresh tick (the reads belong to the agent, emu_agent_wgmma). */
    std::vector<uint32_t> vc;
};

/* Registers of a warpgroup (each thread's accumulators or A fragment) as a
 * wgmma last saw them: at its issue, or as it left them at completion. An
 * MMA issued with no wgmma.fence since the last wait_group may use them only
 * while no other instruction has written them since (PTX ISA 9.7.15.7.1). */
struct emu_wg_regs {
    int words;                  /* 32-bit registers per thread */
    const void *p[128];         /* per thread of the warpgroup */
    std::vector<uint32_t> v;    /* 128 x words */
};

/* A warpgroup's wgmma not yet completed: the open group and the committed
 * ones, oldest first; whether a wgmma.fence came since the last wait_group
 * (set by the fence, cleared by the wait), and the registers the MMAs know.
 * setmaxnreg: registers per thread of each of its warps (0 = launch value
 * not known yet) and whether a setmaxnreg came with no barrier of the whole
 * warpgroup since (PTX ISA: "all warps in the warpgroup must synchronize
 * explicitly before executing subsequent setmaxnreg instructions"). */
struct emu_wg {
    std::vector<emu_wgmma_op> uncommitted;
    std::deque<std::vector<emu_wgmma_op>> groups;
    int fenced, ever_fenced;
    std::vector<emu_wg_regs> known;
    uint32_t wgmma_clock;      /* ticks of the warpgroup's wgmma agent */
    int regs;                  /* setmaxnreg: per-thread registers of its warps */
    int maxnreg_unsynced;      /* a setmaxnreg with no warpgroup barrier since */
    int maxnreg_waiting;       /* its threads wait in a setmaxnreg.inc for registers */
    int maxnreg_want;          /* ... for this count */
};

struct emu_copy {
    unsigned char *dst;
    const unsigned char *src;
    uint32_t src_size;
    uint32_t size; /* bytes copied: 16, or 8 and 4 (ig_cp_async8/4) */
};

/* A TMA operation (cp.async.bulk.tensor) in flight: a load completes on its
 * mbarrier (complete_tx) at a moment the emulator picks, as late as it can
 * (when no thread can run); a store's reads of shared memory complete at
 * its issuer's cp.async.bulk.wait_group. */
struct emu_tma_op {
    int store;                 /* 0: global -> shared (load), 1: shared -> global */
    struct ig_emu_tma_map map; /* the tensor map, copied at issue */
    int32_t coords[5];
    unsigned char *smem;       /* the box in shared memory */
    size_t smem_off;           /* its offset in the dynamic area */
    size_t bar_off;            /* load: the mbarrier's offset */
    unsigned issuer;           /* thread */
    uint32_t bytes;
    std::vector<uint32_t> vc;  /* issuer's clocks at issue, the TMA agent at a fresh tick */
};

struct emu_thread {
    struct emu_fiber fiber;
    unsigned tid;          /* linear thread index in the block */
    ig_emu_dim3 idx;
    int state;
    const char *bar_file;  /* barrier call site while AT_BARRIER / AT_NBAR */
    int bar_line;
    struct emu_coll coll;  /* while AT_WARP */
    struct emu_wgcoll wgc; /* while AT_WARPGROUP */
    size_t mbar_off;       /* while AT_MBAR: the mbarrier ... */
    uint32_t mbar_phase;   /* ... and the phase whose completion it awaits */
    int nbar_id;           /* while AT_NBAR */
    uint32_t proxy_fences; /* fence.proxy.async executed in this block */
    std::vector<emu_copy> uncommitted;           /* cp.async not yet committed */
    std::deque<std::vector<emu_copy>> groups;    /* committed, oldest first */
    /* TMA stores (cp.async.bulk.tensor ... bulk_group): not yet committed,
     * and committed groups (indices into the block's tma list), oldest first. */
    std::vector<size_t> bulk_uncommitted;
    std::deque<std::vector<size_t>> bulk_groups;
    /* The vector clock of happens-before (emu/sync.cc): vc[a] = the last
     * tick of agent a this thread is ordered after; vc[tid] its own. */
    std::vector<uint32_t> vc;
};

/* One byte of shared memory as the race detector sees it. Accesses are by
 * agents: threads (0..n-1), each warpgroup's wgmma (its operand reads) and
 * the TMA unit; an access at agent a's tick c happened before an access
 * with vector clock V iff c <= V[a]. */
#define EMU_READERS 6
struct emu_reader {
    uint32_t clk;
    int16_t who;
};
struct emu_shadow {
    uint32_t w_clk;    /* writer's tick at the write; 0 = never written */
    uint32_t w_fences; /* the writer's proxy_fences at the write (threads) */
    int16_t writer;    /* agent of the last write */
    uint16_t pending;  /* cp.async or TMA loads in flight to this byte */
    int16_t pender;    /* thread whose copy is in flight */
    uint16_t reading;  /* TMA stores in flight that read this byte */
    uint8_t w_async;   /* written by the async proxy (TMA) */
    uint8_t n_r;       /* readers since the write, at most EMU_READERS ... */
    uint16_t epoch;    /* the emu_smem's epoch it belongs to; older: all zero */
    uint32_t r_more;   /* ... or 1 + index of a vector clock of them */
    struct emu_reader r[EMU_READERS];
};

struct emu_smem {
    const void *key;        /* static declaration's key; NULL for dynamic */
    unsigned char *data;    /* exact-size heap buffer */
    size_t bytes;
    /* Reset lazily: an entry whose epoch is not the buffer's is read as
     * zero (emu_shadow_at), so a block's fresh shadow costs no memset of
     * 72 bytes a byte, only the entries it touches. */
    struct emu_shadow *shadow;
    uint16_t epoch;
};

/* Entry i of s's shadow, zeroed first when it is from an earlier block.
 * Every access to a byte goes through emu_smem_check_read or _write first,
 * which take their entries from here; the other users (cp.async, TMA,
 * wgmma) touch only entries those checks took. */
EMU_NO_SANITIZE static inline struct emu_shadow *
emu_shadow_at(struct emu_smem *s, size_t i)
{
    struct emu_shadow *h = &s->shadow[i];
    if (__builtin_expect(h->epoch != s->epoch, 0)) {
        *h = emu_shadow{};
        h->epoch = s->epoch;
    }
    return h;
}

/* __syncthreads and the named barriers bar.sync/bar.arrive a, b (PTX ISA
 * "bar, barrier"): 16 per block; arrivals of the current instance and the
 * join of the arrivers' clocks. */
struct emu_nbar {
    unsigned count;          /* threads the instance needs (0: no instance open) */
    unsigned arrived;
    std::vector<unsigned> waiters;   /* threads in bar.sync */
    std::vector<uint8_t> warp_in;    /* per warp: its arrival counted */
    std::vector<uint32_t> acc;       /* join of the arrivers' clocks */
    const char *file;        /* site of the first arrival */
    int line;
};

/* An mbarrier object (PTX ISA "mbarrier"): expected and pending arrivals,
 * tx-count, the phase (counted, not just its parity), the join of this
 * phase's arrivals and of every completed phase's (acquired by waiters). */
struct emu_mbar {
    uint32_t expected, pending;
    int64_t tx;
    uint32_t phase;
    unsigned init_tid;       /* thread that initialized it ... */
    uint32_t init_clk;       /* ... at this tick */
    int init_fenced;         /* fence.mbarrier_init / fence.proxy.async by it since */
    std::vector<uint32_t> acc, done;
};

struct emu_block {
    std::vector<emu_thread> *threads;
    std::vector<emu_smem> smem;
    size_t smem_total;
    unsigned n, n_done, n_at_barrier;
    /* A programmatic dependent launch (emu.pdl): threads waiting in
     * griddepcontrol.wait, and whether the previous kernel's writes are
     * there yet (ig_emu_pdl_hooks.show ran for this block). */
    unsigned n_at_griddep;
    bool griddep_done;
    unsigned n_agents;      /* vector clock width: threads, wgmma agents, the TMA unit */
    const char *bar_file;   /* site of the barrier threads wait at */
    int bar_line;
    unsigned char *dyn;     /* dynamic shared memory (in smem too) */
    std::deque<unsigned> runq;
    std::vector<unsigned> warp_arrived; /* lanes waiting per warp */
    std::vector<unsigned> wg_arrived;   /* threads waiting per warpgroup */
    std::vector<emu_wg> wg;             /* wgmma in flight per warpgroup */
    std::vector<unsigned> order;        /* scratch for the seeded release order */
    std::vector<uint32_t> join;         /* scratch vector clock */
    std::vector<std::vector<uint32_t>> readers; /* vector clocks of bytes with many readers */
    struct emu_nbar nbar[16];
    std::map<size_t, emu_mbar> mbar;    /* by offset in the dynamic area */
    std::vector<emu_tma_op> tma;        /* TMA operations issued */
    std::vector<size_t> tma_loads;      /* indices of loads in flight */
    uint32_t tma_clock;                 /* ticks of the TMA agent */
    long reg_pool;                      /* setmaxnreg: free registers of the CTA */
    int launch_regs;                    /* setmaxnreg: per thread at launch (0: none seen) */
};

/* The emulator's one global state (one launch at a time). */
struct emu_ctx {
    struct emu_fiber sched;
    struct emu_block *blk;
    struct emu_thread *cur;
    ig_emu_kernel_fn fn;
    void *fn_ctx;
    uint64_t rng;
    uint32_t smem_base;     /* shared address of the dynamic area (launch seed) */
    int faulted;
    int pdl; /* this launch is a programmatic dependent launch (IG_LAUNCH_PDL) */
    size_t smem_optin; /* the dynamic bytes it raised the limit to (IG_SMEM_OPTIN), or 0 */
    struct ig_emu_stats stats;
};
extern struct emu_ctx emu;

/* Records a fault in the current thread (first one wins), then leaves the
 * thread for good: the launch stops. Called only from a running thread. */
[[noreturn]] void emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Records a fault seen by the scheduler itself (deadlock). */
void emu_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Current thread waits (switches out) until the scheduler runs it again. */
void emu_block_current(int state);
/* Makes thread i runnable again (appended to the run queue). */
void emu_wake(unsigned i);
/* A seeded permutation of v, in place. */
void emu_shuffle(unsigned *v, size_t n);

/* ---- happens-before (emu/sync.cc) ----------------------------------------- */

/* Agents beside the threads: warpgroup g's wgmma, the TMA unit. */
static inline unsigned emu_agent_wgmma(const struct emu_block *b, unsigned g) { return b->n + g; }
static inline unsigned emu_agent_tma(const struct emu_block *b)
{
    return b->n + (unsigned)b->wg.size();
}
/* dst = max(dst, src), element-wise. */
void emu_vc_join(std::vector<uint32_t> &dst, const std::vector<uint32_t> &src);
/* dst = min(dst, src), element-wise, over n entries. */
void emu_vc_meet(uint32_t *dst, const uint32_t *src, size_t n);
/* A release by thread t: its clock moves on, so its later accesses are not
 * ordered before what acquires this release. */
static inline void emu_vc_tick(struct emu_thread *t) { t->vc[t->tid]++; }
/* Every thread's clock at block start; the barrier and setmaxnreg state. */
void emu_sync_block_start(struct emu_block *b);
/* Faults for synchronization left open when the block ends (named barriers
 * with arrivals, TMA in flight); 0 or -1 after a fault. */
int emu_sync_block_end(struct emu_block *b);
/* A barrier instance completed with these threads waiting in it: each
 * warpgroup all of whose threads synchronized may execute setmaxnreg again. */
void emu_sync_note_barrier(struct emu_block *b, const unsigned *threads, size_t n);
/* setmaxnreg once the warpgroup's 128 threads are there (emu/wgmma.cc's
 * collective); returns 0 when a .inc must wait for registers (its threads
 * stay blocked and are released by a later .dec). */
int emu_setmaxnreg(struct emu_block *b, unsigned g, const struct emu_wgcoll *c);

/* ---- shared memory (emu/smem.cc) ------------------------------------------ */

/* The allocation holding [p, p+n), or a fault. */
struct emu_smem *emu_smem_find(const void *p, size_t n, const char *what);
/* An access of [p, p+n) by agent `who` with vector clock vc, checked
 * against the shadow: reads of bytes in flight, never written or written
 * without happens-before; writes racing earlier reads or writes. async:
 * the write is the async proxy's (TMA). The agent is recorded. */
void emu_smem_check_read(unsigned who, const uint32_t *vc, const void *p, size_t n,
                         const char *what);
void emu_smem_check_write(unsigned who, const uint32_t *vc, const void *p, size_t n,
                          const char *what, int async);
/* The same for thread t (its own clock). */
void emu_smem_thread_read(struct emu_thread *t, const void *p, size_t n, const char *what);
void emu_smem_thread_write(struct emu_thread *t, const void *p, size_t n, const char *what);
/* Completes all groups but the newest n of thread t (the copies land now). */
void emu_cp_async_complete(struct emu_thread *t, size_t keep);
void emu_smem_free_all(struct emu_block *b);
/* Allocates the block's dynamic shared memory; 0, or -1 after a fault. */
int emu_smem_alloc_dynamic(struct emu_block *b, size_t bytes);
/* The block's dynamic shared memory, for TMA and wgmma (a fault when none). */
const struct emu_smem *emu_dyn_smem(const char *what);

/* ---- warp and warpgroup collectives --------------------------------------- */

/* Warp collectives: computes the result for all 32 lanes of warp w. */
void emu_warp_compute(struct emu_block *b, unsigned w);

/* The current thread arrives at a warpgroup collective (emu/sched.cc). */
void emu_wg_collective(const struct emu_wgcoll *c);
/* Warpgroup collectives (emu/wgmma.cc): all 128 threads of warpgroup g have
 * arrived; checks they agree and does the operation. Returns 0 when the
 * threads must stay blocked (setmaxnreg.inc waiting for registers). */
int emu_warpgroup_compute(struct emu_block *b, unsigned g);
/* Releases the 128 threads of warpgroup g in a seeded order. */
void emu_wake_warpgroup(unsigned g);
/* Faults when thread t exits while its warpgroup has wgmma not waited for. */
void emu_wgmma_check_exit(struct emu_thread *t);

/* ---- TMA (emu/tma.cc) ----------------------------------------------------- */

/* Completes every TMA load in flight (their mbarriers' complete_tx):
 * called when no thread can run. Returns how many it completed. */
size_t emu_tma_complete_loads(struct emu_block *b);
/* The mbarrier at offset off, or a fault naming what used it. */
struct emu_mbar *emu_mbar_at(struct emu_block *b, size_t off, const char *what);
/* complete_tx of `bytes` on the mbarrier, with the completing operation's
 * clocks; completes the phase when nothing else is pending. */
void emu_mbar_complete_tx(struct emu_block *b, size_t off, uint32_t bytes,
                          const std::vector<uint32_t> &vc);

#endif
