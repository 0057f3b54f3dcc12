/* ops/qmatmul_avx2.c: the AVX2 (+FMA, F16C) int8 tile kernels. The
 * functions carry target attributes, so the rest of the binary stays
 * baseline x86-64; ops/qmatmul.c calls them only when the CPU has AVX2, FMA
 * and F16C. Elsewhere (other architectures, other compilers) the table is
 * empty and the scalar kernels run. The kernel bodies are in
 * ops/qmatmul_x86.h. Covered by tests/cpu/test_qmatmul.c. */
#include "ops/qmatmul.h"

#include "core/half.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QMM_X86_TARGET __attribute__((target("avx2,fma,f16c")))
#define QMM_X86_VNNI 0
#include "ops/qmatmul_x86.h"

qmm_tile_fn ops_qmm_tile_avx2(enum quant_type type)
{
    return tile_of(type);
}

qmm_gemm8_fn ops_qmm_gemm8_avx2(enum quant_type type)
{
    return gemm8_of(type);
}

qmm_gemv8_fn ops_qmm_gemv8_avx2(enum quant_type type)
{
    return gemv8_of(type);
}

qmm_gemm8_fn ops_qmm_gemm8_packed_avx2(enum quant_type type)
{
    return gemm8p_of(type);
}

qmm_fgemm8_fn ops_qmm_fgemm8_avx2(void)
{
    return fgemm8;
}

#else

qmm_tile_fn ops_qmm_tile_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_gemm8_fn ops_qmm_gemm8_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_gemv8_fn ops_qmm_gemv8_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_gemm8_fn ops_qmm_gemm8_packed_avx2(enum quant_type type)
{
    (void)type;
    return NULL;
}

qmm_fgemm8_fn ops_qmm_fgemm8_avx2(void)
{
    return NULL;
}

#endif
