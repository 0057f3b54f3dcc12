/* cli/device.c: --device, --gpu-weights and llama.cpp's -ngl into the
 * device a command runs on (cli/device.h; the words themselves are parsed
 * in device_args.c). The order of the checks is the commands' contract: a
 * bad word (exit 2) before a missing device (exit 7), both before any work.
 * Covered by tests/cli/test_run_args.sh and test_args.sh. */
#include "cli/device.h"

#include "cli/cli.h"
#include "core/status.h"

int cli_resolve_device(struct backend_device *dev, int64_t ngl)
{
    if (ngl >= 0 && !dev->is_auto && (dev->kind == BACKEND_CPU) != (ngl == 0))
        return ig_error(IG_E_USAGE, "--device %s with -ngl %lld: %s", dev->kind == BACKEND_CPU
                        ? "cpu" : "cuda", (long long)ngl, ngl == 0
                        ? "-ngl 0 is the CPU; give one of them"
                        : "-ngl N > 0 asks for the GPU; give one of them");
    if (ngl == 0 && dev->is_auto)
        *dev = (struct backend_device){.kind = BACKEND_CPU};
    bool want_gpu = ngl > 0 && dev->is_auto;
    int st = backend_resolve_device(dev);
    if (st == IG_OK && want_gpu && dev->kind == BACKEND_CPU)
        ig_warn("-ngl %lld: no usable CUDA device here, so every layer runs on the CPU",
                (long long)ngl);
    return st;
}

int cli_choose_device(const char *device, int64_t ngl, const char *gpu_weights,
                      struct backend_device *dev, enum backend_gpu_weights *weights)
{
    int st = backend_parse_device(device, dev);
    if (st == IG_OK && gpu_weights)
        st = backend_parse_gpu_weights(gpu_weights, weights);
    if (st == IG_OK)
        st = cli_resolve_device(dev, ngl);
    return st;
}
