/* tests/emu/flash_attn_emu.cc: prefill/flash_attn.cu and
 * prefill/flash_attn_wgmma.cu, the very sources nvcc builds, compiled as
 * host C++ for the CPU emulator: defines prefill_attn_emu() and
 * prefill_attn_wgmma_emu() (and test_emu_set_seed()). */
#include "prefill/flash_attn.cu"
#include "prefill/flash_attn_wgmma.cu"

/* For C tests: the emulator's barrier-order seed (emu.h is C++). */
extern "C" void test_emu_set_seed(uint64_t seed);
extern "C" void test_emu_set_seed(uint64_t seed)
{
    ig_emu_set_seed(seed);
}

/* For C tests: extra ldmatrix wavefronts (bank conflicts) of the last launch. */
extern "C" uint64_t test_emu_ldmatrix_conflicts(void);
extern "C" uint64_t test_emu_ldmatrix_conflicts(void)
{
    return ig_emu_last_stats().ldmatrix_conflicts;
}
