/* emu/internal.h: the emulator's state shared by its files (scheduler, shared
 * memory, warp and warpgroup collectives). Not for kernels or tests. */
#ifndef IGNITE_EMU_INTERNAL_H
#define IGNITE_EMU_INTERNAL_H

#include "emu/emu.h"
#include "emu/fiber.h"

#include <deque>
#include <vector>

enum emu_state { EMU_RUNNABLE, EMU_AT_BARRIER, EMU_AT_WARP, EMU_AT_WARPGROUP, EMU_DONE };
enum emu_op { EMU_OP_MMA = 1, EMU_OP_LDSM, EMU_OP_SHFL, EMU_OP_VOTE };

/* What a lane brings to a warp collective. */
struct emu_coll {
    int op, kind;          /* emu_op; mma kind, ldmatrix num|trans<<4, shfl/vote mode */
    const void *in[3];     /* mma: a, b, c; ldmatrix: row address */
    void *out;             /* mma: d; ldmatrix: registers; shfl, vote: result */
    uint32_t v, b, c, mask; /* shfl operands; vote: v = the predicate */
};

/* What a thread brings to a warpgroup collective (wgmma and its fence,
 * commit, wait). */
enum emu_wg_op { EMU_WG_MMA = 1, EMU_WG_FENCE, EMU_WG_COMMIT, EMU_WG_WAIT };
struct emu_wgcoll {
    int op, kind, n;          /* emu_wg_op; mma: kind and N; wait: groups kept */
    int accumulate, trans_a, trans_b, a_in_regs;
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
 * (set by the fence, cleared by the wait), and the registers the MMAs know. */
struct emu_wg {
    std::vector<emu_wgmma_op> uncommitted;
    std::deque<std::vector<emu_wgmma_op>> groups;
    int fenced, ever_fenced;
    std::vector<emu_wg_regs> known;
};

struct emu_copy {
    unsigned char *dst;
    const unsigned char *src;
    uint32_t src_size;
};

struct emu_thread {
    struct emu_fiber fiber;
    unsigned tid;          /* linear thread index in the block */
    ig_emu_dim3 idx;
    int state;
    const char *bar_file;  /* barrier call site while AT_BARRIER */
    int bar_line;
    struct emu_coll coll;  /* while AT_WARP */
    struct emu_wgcoll wgc; /* while AT_WARPGROUP */
    uint32_t proxy_fences; /* fence.proxy.async executed in this block */
    std::vector<emu_copy> uncommitted;           /* cp.async not yet committed */
    std::deque<std::vector<emu_copy>> groups;    /* committed, oldest first */
};

/* One byte of shared memory as the race detector sees it. */
struct emu_shadow {
    uint32_t w_epoch;  /* epoch of the last write; 0 = never written */
    uint32_t r_epoch;  /* epoch of the last read */
    int16_t writer;    /* thread of the last write */
    int16_t reader;    /* thread of the last read, or EMU_MANY */
    uint16_t pending;  /* cp.async in flight to this byte */
    int16_t pender;    /* thread whose cp.async is in flight */
    uint32_t w_fences; /* the writer's proxy_fences at the write */
};
#define EMU_MANY (-2)

struct emu_smem {
    const void *key;        /* static declaration's key; NULL for dynamic */
    unsigned char *data;    /* exact-size heap buffer */
    size_t bytes;
    struct emu_shadow *shadow;
};

struct emu_block {
    std::vector<emu_thread> *threads;
    std::vector<emu_smem> smem;
    size_t smem_total;
    unsigned n, n_done, n_at_barrier;
    uint32_t epoch;         /* current barrier epoch (unique across blocks) */
    const char *bar_file;   /* site of the barrier threads wait at */
    int bar_line;
    unsigned char *dyn;     /* dynamic shared memory (in smem too) */
    std::deque<unsigned> runq;
    std::vector<unsigned> warp_arrived; /* lanes waiting per warp */
    std::vector<unsigned> wg_arrived;   /* threads waiting per warpgroup */
    std::vector<emu_wg> wg;             /* wgmma in flight per warpgroup */
    std::vector<unsigned> order;        /* scratch for the seeded release order */
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

/* Shared memory: the allocation holding [p, p+n), or a fault. */
struct emu_smem *emu_smem_find(const void *p, size_t n, const char *what);
void emu_smem_check_read(unsigned tid, const void *p, size_t n, const char *what);
void emu_smem_check_write(unsigned tid, const void *p, size_t n, const char *what);
/* Completes all groups but the newest n of thread t (the copies land now). */
void emu_cp_async_complete(struct emu_thread *t, size_t keep);
void emu_smem_free_all(struct emu_block *b);
/* Allocates the block's dynamic shared memory; 0, or -1 after a fault. */
int emu_smem_alloc_dynamic(struct emu_block *b, size_t bytes);

/* Warp collectives: computes the result for all 32 lanes of warp w. */
void emu_warp_compute(struct emu_block *b, unsigned w);

/* The current thread arrives at a warpgroup collective (emu/sched.cc). */
void emu_wg_collective(const struct emu_wgcoll *c);
/* Warpgroup collectives (emu/wgmma.cc): all 128 threads of warpgroup g have
 * arrived; checks they agree and does the operation. */
void emu_warpgroup_compute(struct emu_block *b, unsigned g);
/* Faults when thread t exits while its warpgroup has wgmma not waited for. */
void emu_wgmma_check_exit(struct emu_thread *t);

#endif
