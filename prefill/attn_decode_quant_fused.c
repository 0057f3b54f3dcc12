/* prefill/attn_decode_quant_fused.c: the quantized-V decode loops of the
 * int8 path's attention (prefill/attn_fused.h; built with
 * -ffp-contract=fast, prefill/CMakeLists.txt). */
#define ATTN_FUSED 1
#include "prefill/attn_decode_quant.c"
