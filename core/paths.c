/* core/paths.c: cache directory resolution, the same rule as
 * scripts/fetch-model.sh (keep the two in step). */
#include "core/paths.h"

#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>

int ig_cache_dir(char *buf, size_t cap)
{
    const char *v;
    int n;
    if ((v = getenv("IGNITE_CACHE")) && *v)
        n = snprintf(buf, cap, "%s", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        n = snprintf(buf, cap, "%s/ignite", v);
    else if ((v = getenv("HOME")) && *v)
        n = snprintf(buf, cap, "%s/.cache/ignite", v);
    else
        return ig_error(IG_E_USAGE, "no cache directory: set IGNITE_CACHE or HOME");
    if (n < 0 || (size_t)n >= cap)
        return ig_error(IG_E_USAGE, "cache directory path is too long");
    return IG_OK;
}

int ig_default_model_path(char *buf, size_t cap)
{
    char dir[4096];
    int st = ig_cache_dir(dir, sizeof dir);
    if (st != IG_OK)
        return st;
    int n = snprintf(buf, cap, "%s/%s", dir, IG_DEFAULT_MODEL_FILE);
    if (n < 0 || (size_t)n >= cap)
        return ig_error(IG_E_USAGE, "default model path is too long");
    return IG_OK;
}
