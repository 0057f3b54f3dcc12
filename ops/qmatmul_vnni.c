/* ops/qmatmul_vnni.c: the int8 tile kernels for CPUs with AVX512-VNNI and
 * AVX512-VL (Intel Ice Lake and later, AMD Zen 4 and later): 256-bit
 * vectors, vpdpbusd for the u8 x s8 dot products, and prefill GEMMs on
 * 512-bit ones (int8, and f32/f16/bf16 weights). The functions carry
 * target attributes, so the rest of the binary stays baseline x86-64;
 * ops/qmatmul.c calls them only when the CPU has these features. Elsewhere
 * (other architectures, other compilers) the table is empty and the scalar
 * kernels run. The kernel bodies are in ops/qmatmul_x86.h and
 * ops/qmatmul_zmm.h. Covered by tests/cpu/test_qmatmul.c. */
#include "ops/qmatmul.h"

#include "core/half.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QMM_X86_TARGET \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define QMM_X86_VNNI 1
#define QMM_X86_DPBUSD _mm256_dpbusd_epi32
#define QMM_X86_ZMM /* the 512-bit GEMMs, ops/qmatmul_zmm.h */
#include "ops/qmatmul_x86.h"
#include "ops/qmatmul_zmm.h"

QMM_X86_TABLE(vnni)
qmm_gemm16_fn ops_qmm_gemm16_packed_vnni(enum quant_type type) { return gemm16p_of(type); }
qmm_fgemm16_fn ops_qmm_fgemm16_vnni(void) { return fgemm16; }
qmm_fgemm_packed_fn ops_qmm_fgemm_packed_vnni(void) { return fgemm16_packed; }

#else

QMM_EMPTY_TABLE(vnni)
qmm_gemm16_fn ops_qmm_gemm16_packed_vnni(enum quant_type type) { return NULL; }
qmm_fgemm16_fn ops_qmm_fgemm16_vnni(void) { return NULL; }
qmm_fgemm_packed_fn ops_qmm_fgemm_packed_vnni(void) { return NULL; }

#endif
