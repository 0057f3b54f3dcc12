/* ops/gpu_arch_emu.cc: ops/gpu_arch.cu compiled as host C++ for the CPU
 * emulator, for ignite_gpu_emu (gk_*_emu). */
#include "ops/gpu_arch.cu"
