/* cli/device.h: the device a command runs on, chosen from its --device,
 * --gpu-weights and llama.cpp's -ngl as given: run, chat, batch, bench and
 * perplexity choose it alike (the parsing and the check that a CUDA device
 * is there are backend/'s); llama.cpp's -fa, taken and checked.
 * Covered by tests/cli/test_run_args.sh. */
#ifndef IGNITE_CLI_DEVICE_H
#define IGNITE_CLI_DEVICE_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stdint.h>

/* -ngl, --n-gpu-layers N as llama.cpp's scripts pass it: -1 (also when not
 * given) leaves --device to choose; 0 is the CPU; N > 0 the GPU where one is
 * usable (ignite puts every layer there, however many N says), else the CPU
 * with a warning, as llama.cpp's CPU builds run. `list`: a comma list as
 * llama-bench takes (bench), whose items must all be the same. IG_OK or
 * IG_E_USAGE (one line). */
#define CLI_NGL_UNSET (-1)
int cli_parse_ngl(const char *arg, bool list, int64_t *ngl);

/* -fa, --flash-attn on|off|auto (or 1, 0; `list` as for -ngl): checked and
 * taken, since ignite always uses its fused attention kernels; off is a
 * warning line saying so. IG_OK or IG_E_USAGE (one line). */
int cli_parse_flash_attn(const char *arg, bool list);

/* The KV cache's element types as run, chat, batch, bench and perplexity
 * take them: --cache-type T sets K and V, --cache-type-k (-ctk) and
 * --cache-type-v (-ctv) one each (llama.cpp's words): f32, f16, q8_0, q4_0. */
struct cli_cache_types {
    enum kv_dtype k, v;
    bool given; /* any of the three was given */
};
enum cli_cache_which { CLI_CACHE_KV, CLI_CACHE_K, CLI_CACHE_V };
/* Parses one of the three options' value into t. IG_OK or IG_E_USAGE (one
 * line naming the option and the types). */
int cli_parse_cache_type(enum cli_cache_which which, const char *arg, struct cli_cache_types *t);

/* Resolves a parsed device (auto: CUDA where a device is found, else the
 * CPU) with -ngl `ngl` (CLI_NGL_UNSET: none): an explicit --device that says
 * otherwise (cpu with N > 0, cuda with 0) is IG_E_USAGE, one line. Returns
 * IG_OK, IG_E_USAGE, or IG_E_DEVICE for a CUDA device that is not there. */
int cli_resolve_device(struct backend_device *dev, int64_t ngl);

/* Parses device ("auto", "cpu", "cuda", "cuda:N") and gpu_weights
 * ("native", "f16"; NULL: not asked, *weights untouched), then resolves the
 * device with `ngl` (cli_resolve_device). Returns IG_OK, IG_E_USAGE for a
 * bad word or a conflict, or IG_E_DEVICE for a CUDA device that is not
 * there; each error is one line on stderr. */
int cli_choose_device(const char *device, int64_t ngl, const char *gpu_weights,
                      struct backend_device *dev, enum backend_gpu_weights *weights);

#endif
