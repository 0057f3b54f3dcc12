/* tests/emu/ignite_emu_main.c: the test program ignite_emu: ignite's whole
 * CLI (main.c, linked beside this file) whose --device cuda runs the CUDA
 * backend under the emulator (ignite_gpu_emu: the same orchestration and
 * kernel sources on the CPU) instead of nvcc's, so that CI can run the CLI's
 * CUDA paths (batch, --pd, mpirun ranks, bench --requests) on a machine with
 * no GPU. Slow (every launch emulated, ASan + UBSan always): tiny models
 * only. Never installed; `ignite_emu --version` says "cuda: emulated".
 * Covered by tests/tp/test_cli_emu.py. */
#include "backend/backend.h"
#include "backend/gpu.h"

/* Before main, so every command and every rank of `mpirun ignite_emu` sees
 * the emulated table (main.c stays ignite's own). */
__attribute__((constructor)) static void use_emulated_cuda(void)
{
    backend_set_cuda(&gpu_entry_emu);
}
