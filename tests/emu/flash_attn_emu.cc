/* tests/emu/flash_attn_emu.cc: prefill/flash_attn.cu, the very source nvcc
 * builds, compiled as host C++ for the CPU emulator: defines
 * ig_flash_attn_emu(). */
#include "prefill/flash_attn.cu"
