/* emu/fiber.h: minimal cooperative fibers for the emulator's GPU threads.
 *
 * x86-64 uses a hand-rolled switch (callee-saved registers, MXCSR and the x87
 * control word; no syscalls, so ~10 ns a switch); other targets fall back to
 * ucontext. Switches are annotated for AddressSanitizer
 * (__sanitizer_{start,finish}_switch_fiber) so ASan follows the stacks.
 * Every switch goes scheduler <-> fiber; fibers never switch to each other.
 * Covered by every tests/emu test. */
#ifndef IGNITE_EMU_FIBER_H
#define IGNITE_EMU_FIBER_H

#include <stddef.h>

/* The hand-rolled switch on x86-64; -DEMU_FIBER_UCONTEXT forces ucontext. */
#if defined(__x86_64__) && !defined(EMU_FIBER_UCONTEXT)
#define EMU_FIBER_ASM 1
#else
#define EMU_FIBER_ASM 0
#endif

#if !EMU_FIBER_ASM
#include <ucontext.h>
#endif

struct emu_fiber {
    void *sp;                 /* saved stack pointer while switched out (x86-64) */
#if !EMU_FIBER_ASM
    ucontext_t uc;
#endif
    char *stack;              /* mmap'ed region, lowest address is a guard page */
    size_t stack_size;        /* usable bytes above the guard page */
    void *fake_stack;         /* ASan's fake stack while switched out */
    const void *asan_bottom;  /* for the scheduler: its stack, learnt at first switch */
    size_t asan_size;
    void (*entry)(void *);
    void *arg;
    /* Set by emu_fiber_finish: the stack above it is all ASan unpoisons at
     * the next emu_fiber_prepare (NULL: the whole stack). */
    const char *clean_from;
};

/* Allocates a stack of `size` bytes (plus a guard page). Returns 0 or -1. */
int emu_fiber_alloc(struct emu_fiber *f, size_t size);
void emu_fiber_free(struct emu_fiber *f);

/* Makes f start afresh in entry(arg) at its next resume. entry never returns;
 * it ends with emu_fiber_exit(). */
void emu_fiber_prepare(struct emu_fiber *f, void (*entry)(void *), void *arg);

/* Fiber side: the first call of every entry function (ASan bookkeeping). */
void emu_fiber_entered(struct emu_fiber *f, struct emu_fiber *sched);

/* Scheduler side: run f until it yields or exits. */
void emu_fiber_resume(struct emu_fiber *sched, struct emu_fiber *f);
/* Fiber side: go back to the scheduler; returns when resumed. */
void emu_fiber_yield(struct emu_fiber *f, struct emu_fiber *sched);
/* Fiber side: go back to the scheduler for good. */
[[noreturn]] void emu_fiber_exit(struct emu_fiber *f, struct emu_fiber *sched);
/* The same when every function the entry called has returned: ASan has
 * unpoisoned their frames itself, so the next emu_fiber_prepare unpoisons
 * only the few frames still there instead of the whole stack. */
[[noreturn]] void emu_fiber_finish(struct emu_fiber *f, struct emu_fiber *sched);

#endif
