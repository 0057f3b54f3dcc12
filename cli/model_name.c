/* cli/model_name.c: how the commands name the model they run: llama-bench's
 * model_type ("llama 134.52 M Q4_1", the type by general.file_type as
 * llama.cpp names it: models/model.h's model_type_name) and the keys that name the model in
 * run --json, in each line of `ignite batch` and in bench's JSON, so that a
 * script finds them under one name everywhere (docs/cli.md). What a type
 * is called is decided here only: bench's table and rows call it too.
 * Covered by tests/cli/test_output.py. */
#include "cli/cli.h"

#include "models/model.h"

#include <cjson/cJSON.h>

void cli_model_params(char *buf, size_t cap, int64_t n)
{
    if (n >= 1000000000)
        snprintf(buf, cap, "%.2f B", (double)n / 1e9);
    else
        snprintf(buf, cap, "%.2f M", (double)n / 1e6);
}

void cli_model_type(const struct model *m, char *buf, size_t cap)
{
    char params[32];
    cli_model_params(params, sizeof params, m->n_params);
    snprintf(buf, cap, "%s %s %s", m->hp.arch, params, model_type_name(m));
}

bool cli_add_model_json(struct cJSON *o, const char *path, const struct model *m)
{
    char type[96];
    cli_model_type(m, type, sizeof type);
    return cJSON_AddStringToObject(o, "model_filename", path) &&
           cJSON_AddStringToObject(o, "model_arch", m->hp.arch) &&
           cJSON_AddStringToObject(o, "model_type", type);
}
