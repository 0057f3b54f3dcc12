/* cli/version.c: what `ignite --version` and bench's rows say about the
 * build: the version, the git commit and its number (written at build time
 * by cmake/build_info.cmake), the compiler, the CUDA toolkit the build used
 * (or "emulated" in the test program ignite_emu), and the int8 kernels
 * this CPU runs (chosen at run time).
 * Covered by tests/cli/test_args.sh and tests/cli/test_bench.py. */
#include "cli/cli.h"

#include "backend/backend.h"
#include "build_info.h"
#include "ops/qmatmul.h"

#include <stdio.h>

#if IGNITE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define IG_STR2(x) #x
#define IG_STR(x) IG_STR2(x)

#if defined(__clang__)
#define IG_COMPILER "clang " IG_STR(__clang_major__) "." IG_STR(__clang_minor__) "." \
    IG_STR(__clang_patchlevel__)
#elif defined(__GNUC__)
#define IG_COMPILER "gcc " IG_STR(__GNUC__) "." IG_STR(__GNUC_MINOR__) "." \
    IG_STR(__GNUC_PATCHLEVEL__)
#else
#define IG_COMPILER "unknown"
#endif

#if IGNITE_HAVE_CUDA /* CUDART_VERSION is major * 1000 + minor * 10 */
#define IG_CUDA_MAJOR (CUDART_VERSION / 1000)
#define IG_CUDA_MINOR (CUDART_VERSION % 1000 / 10)
#endif

/* What --device cuda runs, for nobody to take ignite_emu's figures for a
 * GPU's. */
#define IG_CUDA_EMULATED "emulated (ignite_emu: the CUDA backend on the CPU, no GPU)"

void cli_build_info(struct cli_build *b)
{
    static char cuda[sizeof IG_CUDA_EMULATED] = "none";
#if IGNITE_HAVE_CUDA
    snprintf(cuda, sizeof cuda, "%d.%d", IG_CUDA_MAJOR, IG_CUDA_MINOR);
#endif
    const struct backend_cuda *table = backend_cuda();
    if (table && table->emulated)
        snprintf(cuda, sizeof cuda, "%s", IG_CUDA_EMULATED);
    *b = (struct cli_build){
        .version = IGNITE_VERSION,
        .commit = IGNITE_GIT_COMMIT,
        .number = IGNITE_GIT_NUMBER,
        .compiler = IG_COMPILER,
        .cuda = cuda,
        .isa = ops_qmm_isa_name(ops_qmm_best_isa()),
    };
}

void cli_print_version(void)
{
    struct cli_build b;
    cli_build_info(&b);
    printf("ignite %s\n"
           "build: %s (%lld)\n"
           "compiler: %s\n"
           "cuda: %s\n"
           "cpu int8 kernels: %s\n",
           b.version, b.commit, (long long)b.number, b.compiler, b.cuda, b.isa);
}
