/* ops/gpu_weights_emu.cc: ops/gpu_weights.cu compiled as host C++ for the
 * CPU emulator, for ignite_gpu_emu (gk_*_emu). */
#include "ops/gpu_weights.cu"
