/* ops/qmatmul_avxvnni.c: the int8 kernels for CPUs with AVX-VNNI and no
 * AVX512-VNNI (Intel's client cores from Alder Lake on, its E-core Xeons):
 * ops/qmatmul_vnni.c's kernels built for the VEX form of vpdpbusd, with 16
 * ymm registers instead of 32. The integer sums are exact either way, so
 * every result is the AVX512-VNNI set's bit for bit. ops/qmatmul.c calls
 * them only where CPUID reports AVX-VNNI; a compiler without its header
 * (GCC before 11, clang before 12) builds an empty table. The kernel bodies are in
 * ops/qmatmul_x86.h. Covered by tests/cpu/test_qmatmul.c. */
#include "ops/qmatmul.h"

#include "core/half.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(__has_include)
#if __has_include(<avxvnniintrin.h>)
#define QMM_AVXVNNI_BUILT 1
#endif
#endif

#ifdef QMM_AVXVNNI_BUILT
#define QMM_X86_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define QMM_X86_VNNI 1
#define QMM_X86_DPBUSD _mm256_dpbusd_avx_epi32
#include "ops/qmatmul_x86.h"

QMM_X86_TABLE(avxvnni)

#else

QMM_EMPTY_TABLE(avxvnni)

#endif
