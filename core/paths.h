/* core/paths.h: where ignite keeps its cache and finds the default model. */
#ifndef IGNITE_CORE_PATHS_H
#define IGNITE_CORE_PATHS_H

#include <stddef.h>

/* File name of the default model inside the cache directory. */
#define IG_DEFAULT_MODEL_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"

/* Writes the cache directory into buf: $IGNITE_CACHE, else
 * $XDG_CACHE_HOME/ignite, else $HOME/.cache/ignite. Returns IG_OK, or
 * IG_E_USAGE (with a message) when none is set or buf is too small. */
int ig_cache_dir(char *buf, size_t cap);

/* Writes the default model's path into buf (cache dir + file name). Same
 * returns as ig_cache_dir. Does not check that the file exists. */
int ig_default_model_path(char *buf, size_t cap);

#endif
