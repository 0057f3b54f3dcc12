/* cli/device.c: --device and --gpu-weights into the device a command runs
 * on (cli/device.h). The order of the checks is the commands' contract: a
 * bad word (exit 2) before a missing device (exit 7), both before any work.
 * Covered by tests/cli/test_run_args.sh. */
#include "cli/device.h"

#include "core/status.h"

int cli_choose_device(const char *device, const char *gpu_weights, struct backend_device *dev,
                      enum backend_gpu_weights *weights)
{
    int st = backend_parse_device(device, dev);
    if (st == IG_OK && gpu_weights)
        st = backend_parse_gpu_weights(gpu_weights, weights);
    if (st == IG_OK)
        st = backend_resolve_device(dev);
    return st;
}
