/* ops/gpu_gemv_emu.cc: ops/gpu_gemv.cu compiled as host C++ for the
 * emulator, for ignite_gpu_emu (gk_gemv_f16_emu). */
#include "ops/gpu_gemv.cu"
