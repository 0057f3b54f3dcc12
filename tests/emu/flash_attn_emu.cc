/* tests/emu/flash_attn_emu.cc: prefill/flash_attn.cu,
 * prefill/flash_attn_wgmma.cu and prefill/flash_attn_ws.cu, the very sources
 * nvcc builds, compiled as host C++ for the CPU emulator: defines
 * prefill_attn_emu(), prefill_attn_wgmma_emu() and prefill_attn_ws_emu()
 * (and test_emu_set_seed()). */
#include "prefill/flash_attn.cu"
#include "prefill/flash_attn_wgmma.cu"
#include "prefill/flash_attn_ws.cu"

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

/* For C tests: the SM count the persistent (ws) kernels size their grid by. */
extern "C" void test_emu_set_sm_count(int n);
extern "C" void test_emu_set_sm_count(int n)
{
    ig_emu_set_sm_count(n);
}
