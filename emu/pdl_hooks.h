/* emu/pdl_hooks.h: what a programmatic dependent launch's blocks see before
 * their griddepcontrol.wait under the emulator (emu/emu.h,
 * ig_emu_next_launch_pdl), settable from C tests as well as C++.
 *
 * hide runs as each block of such a launch starts (make what the previous
 * kernel writes look unwritten: poison it), show once all the block's
 * threads have reached ig_grid_dependency_wait or exited (put it back).
 * Blocks run one after another, so every block's reads before its wait see
 * the poison, and a kernel that reads its inputs before waiting computes
 * from it. NULL (the default): nothing hidden; the blocks still meet at the
 * wait and a block that never waits is still a fault. Plain launches never
 * call them. Covered by tests/emu/test_emu_sched.cc. */
#ifndef IGNITE_EMU_PDL_HOOKS_H
#define IGNITE_EMU_PDL_HOOKS_H

#ifdef __cplusplus
extern "C" {
#endif

struct ig_emu_pdl_hooks {
    void (*hide)(void *ctx);
    void (*show)(void *ctx);
    void *ctx;
};
void ig_emu_set_pdl_hooks(const struct ig_emu_pdl_hooks *hooks);

#ifdef __cplusplus
}
#endif
#endif
