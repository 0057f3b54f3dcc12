/* prefill/flash_attn_ws_emu.cc: prefill/flash_attn_ws.cu compiled as host
 * C++ for the emulator, for ignite_gpu_emu (prefill_attn_ws_emu). */
#include "prefill/flash_attn_ws.cu"
