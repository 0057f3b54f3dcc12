/* prefill/flash_attn_emu.cc: prefill/flash_attn.cu compiled as host C++ for
 * the emulator, for ignite_gpu_emu (prefill_attn_emu). */
#include "prefill/flash_attn.cu"
