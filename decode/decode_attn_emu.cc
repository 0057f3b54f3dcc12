/* decode/decode_attn_emu.cc: decode/decode_attn.cu compiled as host C++ for
 * the emulator, for ignite_gpu_emu (decode_attn_emu). */
#include "decode/decode_attn.cu"
