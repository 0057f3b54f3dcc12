/* prefill/attn_tiled_fused.c: the tiled attention of the int8 path, fused
 * multiply-adds and a polynomial softmax (prefill/attn_fused.h; built with
 * -ffp-contract=fast, prefill/CMakeLists.txt). */
#define ATTN_FUSED 1
#include "prefill/attn_tiled.c"
