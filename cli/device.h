/* cli/device.h: the device a command runs on, chosen from its --device and
 * --gpu-weights as given: run, chat, batch and bench choose it alike (the
 * parsing and the check that a CUDA device is there are backend/'s).
 * Covered by tests/cli/test_run_args.sh. */
#ifndef IGNITE_CLI_DEVICE_H
#define IGNITE_CLI_DEVICE_H

#include "backend/backend.h"

/* Parses device ("auto", "cpu", "cuda", "cuda:N") and gpu_weights
 * ("native", "f16"; NULL: not asked, *weights untouched), then resolves the
 * device (auto: CUDA where a device is found, else the CPU). Returns IG_OK,
 * IG_E_USAGE for a bad word, or IG_E_DEVICE for a CUDA device that is not
 * there; each error is one line on stderr. */
int cli_choose_device(const char *device, const char *gpu_weights, struct backend_device *dev,
                      enum backend_gpu_weights *weights);

#endif
