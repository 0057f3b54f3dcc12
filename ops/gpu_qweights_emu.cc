/* ops/gpu_qweights_emu.cc: ops/gpu_qweights.cu compiled as host C++ for the CPU
 * emulator, for ignite_gpu_emu (gk_*_emu). */
#include "ops/gpu_qweights.cu"
