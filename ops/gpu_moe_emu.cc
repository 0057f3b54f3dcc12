/* ops/gpu_moe_emu.cc: ops/gpu_moe.cu compiled as host C++ for the CPU
 * emulator, for ignite_gpu_emu (gk_moe_*_emu). */
#include "ops/gpu_moe.cu"
