/* ops/gpu_qgemm_emu.cc: ops/gpu_qgemm.cu compiled as host C++ for the CPU
 * emulator, for ignite_gpu_emu (gk_qmma_emu). */
#include "ops/gpu_qgemm.cu"
