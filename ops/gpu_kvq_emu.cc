/* ops/gpu_kvq_emu.cc: ops/gpu_kvq.cu compiled as host C++ for the CPU
 * emulator, for ignite_gpu_emu (gk_kvq_write_emu, gk_hadamard_f16_emu). */
#include "ops/gpu_kvq.cu"
