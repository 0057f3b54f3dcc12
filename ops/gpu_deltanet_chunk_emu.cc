/* ops/gpu_deltanet_chunk_emu.cc: ops/gpu_deltanet_chunk.cu compiled as host
 * C++ for the CPU emulator, for ignite_gpu_emu (gk_dn_chunk_emu). */
#include "ops/gpu_deltanet_chunk.cu"
