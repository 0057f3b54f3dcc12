/* ops/gpu_deltanet_emu.cc: ops/gpu_deltanet.cu compiled as host C++ for the
 * CPU emulator, for ignite_gpu_emu (gk_dn_*_emu). */
#include "ops/gpu_deltanet.cu"
