/* tests/emu/qmm_emu_stats.cc: the emulator's counters for the C test
 * test_qmm_emu.c (emu/emu.h is C++). */
#include "emu/emu.h"

/* Extra ldmatrix wavefronts (bank conflicts) of the last launch. */
extern "C" uint64_t test_qmm_ldmatrix_conflicts(void);
extern "C" uint64_t test_qmm_ldmatrix_conflicts(void)
{
    return ig_emu_last_stats().ldmatrix_conflicts;
}
