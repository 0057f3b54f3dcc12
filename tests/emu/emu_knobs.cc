/* tests/emu/emu_knobs.cc: the emulator's settings and counters for the C
 * attention tests (emu/emu.h is C++). The kernels themselves come from
 * ignite_gpu_emu, the build the CUDA backend's tests run. */
#include "emu/emu.h"

#include <stdint.h>

/* The barrier-order seed. */
extern "C" void test_emu_set_seed(uint64_t seed);
extern "C" void test_emu_set_seed(uint64_t seed)
{
    ig_emu_set_seed(seed);
}

/* Extra ldmatrix wavefronts (bank conflicts) of the last launch. */
extern "C" uint64_t test_emu_ldmatrix_conflicts(void);
extern "C" uint64_t test_emu_ldmatrix_conflicts(void)
{
    return ig_emu_last_stats().ldmatrix_conflicts;
}

/* The SM count the persistent (ws) kernels size their grid by. */
extern "C" void test_emu_set_sm_count(int n);
extern "C" void test_emu_set_sm_count(int n)
{
    ig_emu_set_sm_count(n);
}

/* TMA stores completed in the last launch (the ws kernel's O boxes: each
 * work item's stored once). */
extern "C" uint64_t test_emu_tma_stores(void);
extern "C" uint64_t test_emu_tma_stores(void)
{
    return ig_emu_last_stats().tma_stores;
}

/* The most blocks on grid.y (0: CUDA's 65535): the launchers that cut grid.y
 * into launches, tested small. */
extern "C" void test_emu_set_max_grid_y(unsigned n);
extern "C" void test_emu_set_max_grid_y(unsigned n)
{
    ig_emu_set_max_grid_y(n);
}
