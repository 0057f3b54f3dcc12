/* prefill/flash_attn_wgmma_emu.cc: prefill/flash_attn_wgmma.cu compiled as
 * host C++ for the emulator, for ignite_gpu_emu (prefill_attn_wgmma_emu). */
#include "prefill/flash_attn_wgmma.cu"
