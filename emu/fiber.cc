/* emu/fiber.cc: the context switch behind emu/fiber.h (see there). */
#include "emu/fiber.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if EMU_FIBER_ASM
/* emu_switch(&from_sp, to_sp): push the callee-saved state, park rsp in
 * *from_sp, load to_sp, pop its state, return into it. The state block is
 * [mxcsr|x87cw][r15][r14][r13][r12][rbx][rbp][return address]. */
extern "C" void emu_switch(void **from_sp, void *to_sp);
/* First code a fresh fiber runs: r12 = arg, r13 = entry. */
extern "C" void emu_fiber_trampoline(void);
asm(R"(
    .text
    .globl emu_switch
    .type emu_switch,@function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch

    .globl emu_fiber_trampoline
    .type emu_fiber_trampoline,@function
emu_fiber_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size emu_fiber_trampoline, .-emu_fiber_trampoline
)");
#else
static void emu_uc_entry(unsigned lo, unsigned hi)
{
    struct emu_fiber *f = (struct emu_fiber *)(((uintptr_t)hi << 32) | lo);
    f->entry(f->arg);
    abort();
}
#endif

int emu_fiber_alloc(struct emu_fiber *f, size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size = (size + page - 1) / page * page;
    memset(f, 0, sizeof *f);
    void *m = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
        return -1;
    mprotect(m, page, PROT_NONE); /* a stack overflow faults instead of corrupting */
    f->stack = (char *)m + page;
    f->stack_size = size;
    return 0;
}

void emu_fiber_free(struct emu_fiber *f)
{
    if (f->stack) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        munmap(f->stack - page, f->stack_size + page);
    }
    memset(f, 0, sizeof *f);
}

#if EMU_FIBER_ASM
static void emu_fiber_start(void *arg);
#endif

void emu_fiber_prepare(struct emu_fiber *f, void (*entry)(void *), void *arg)
{
#if EMU_ASAN
    /* A fiber abandoned mid-frame (after a fault) leaves poisoned redzones;
     * one that finished leaves them only in the frames above clean_from.
     * (The whole 256 KiB each block and thread was most of the memset time
     * of the emulated tests.) */
    const char *from = f->stack;
    if (f->clean_from && f->clean_from > f->stack && f->clean_from < f->stack + f->stack_size)
        from = f->clean_from;
    __asan_unpoison_memory_region(from, (size_t)(f->stack + f->stack_size - from));
#endif
    f->clean_from = NULL;
    f->entry = entry;
    f->arg = arg;
    f->fake_stack = NULL;
#if EMU_FIBER_ASM
    uintptr_t top = ((uintptr_t)(f->stack + f->stack_size)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 64 - 16);
    uint32_t csr[2] = {0x1f80u, 0x037fu}; /* default MXCSR, default x87 control word */
    memcpy(&sp[0], csr, sizeof csr);
    sp[1] = 0;                                 /* r15 */
    sp[2] = 0;                                 /* r14 */
    sp[3] = (uint64_t)(uintptr_t)&emu_fiber_start; /* r13: entry */
    sp[4] = (uint64_t)(uintptr_t)f;            /* r12: arg */
    sp[5] = 0;                                 /* rbx */
    sp[6] = 0;                                 /* rbp */
    sp[7] = (uint64_t)(uintptr_t)&emu_fiber_trampoline;
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = NULL;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->uc, (void (*)(void))emu_uc_entry, 2, (unsigned)(p & 0xffffffffu),
                (unsigned)(p >> 32));
#endif
}

#if EMU_FIBER_ASM
static void emu_fiber_start(void *arg)
{
    struct emu_fiber *f = (struct emu_fiber *)arg;
    f->entry(f->arg);
    abort(); /* entry ends with emu_fiber_exit() */
}
#endif

static void emu_raw_switch(struct emu_fiber *from, struct emu_fiber *to)
{
#if EMU_FIBER_ASM
    emu_switch(&from->sp, to->sp);
#else
    swapcontext(&from->uc, &to->uc);
#endif
}

void emu_fiber_resume(struct emu_fiber *sched, struct emu_fiber *f)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&sched->fake_stack, f->stack, f->stack_size);
#endif
    emu_raw_switch(sched, f);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(sched->fake_stack, NULL, NULL);
#endif
}

/* Called on the fiber right after every switch into it. A fresh fiber has no
 * fake stack yet; it also learns the scheduler's stack bounds here. */
static inline void emu_fiber_arrived(struct emu_fiber *f, struct emu_fiber *sched)
{
#if EMU_ASAN
    const void *bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(f->fake_stack, &bottom, &size);
    sched->asan_bottom = bottom;
    sched->asan_size = size;
#else
    (void)f;
    (void)sched;
#endif
}

void emu_fiber_yield(struct emu_fiber *f, struct emu_fiber *sched)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&f->fake_stack, sched->asan_bottom, sched->asan_size);
#endif
    emu_raw_switch(f, sched);
    emu_fiber_arrived(f, sched);
}

void emu_fiber_exit(struct emu_fiber *f, struct emu_fiber *sched)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(NULL, sched->asan_bottom, sched->asan_size);
#endif
    emu_raw_switch(f, sched);
    abort(); /* an exited fiber is never resumed without emu_fiber_prepare() */
}

void emu_fiber_entered(struct emu_fiber *f, struct emu_fiber *sched)
{
    emu_fiber_arrived(f, sched);
}

void emu_fiber_finish(struct emu_fiber *f, struct emu_fiber *sched)
{
    /* Below this frame lie only frames that returned (unpoisoned by ASan);
     * the margin covers this function's own locals. */
    f->clean_from = (const char *)__builtin_frame_address(0) - 1024;
    emu_fiber_exit(f, sched);
}
