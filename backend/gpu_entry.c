/* backend/gpu_entry.c: the CUDA backend's entry points as backend.c's table
 * (struct backend_cuda), one per build of it: gpu_entry_cuda in nvcc's
 * (ignite_gpu: what `ignite --device cuda` runs) and gpu_entry_emu under the
 * emulator (ignite_gpu_emu: what the test program ignite_emu runs,
 * tests/emu/ignite_emu_main.c). Covered by tests/tp/test_cli_emu.py. */
#include "backend/gpu.h"

const struct backend_cuda IG_DEV(gpu_entry) = {
#ifdef IG_EMU_BACKEND
    .emulated = true,
#endif
    .device_count = IG_DEV(gpu_device_count),
    .create = IG_DEV(gpu_backend_create),
    .create_tp = IG_DEV(gpu_backend_create_tp),
    .tp_connect = IG_DEV(gpu_tp_connect),
};
