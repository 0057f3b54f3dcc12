/* decode/greedy_emu.cc: decode/greedy.cu compiled as host C++ for the
 * emulator, for ignite_gpu_emu (gk_greedy_rows_emu). */
#include "decode/greedy.cu"
