/* core/mapped_file.h: a whole file memory-mapped read-only.
 *
 * Model files are pointed into, never copied. An empty file maps to
 * data == NULL, size == 0 (mmap refuses length 0). */
#ifndef IGNITE_CORE_MAPPED_FILE_H
#define IGNITE_CORE_MAPPED_FILE_H

#include <stddef.h>

struct ig_mapped_file {
    const unsigned char *data; /* read-only view of the file, or NULL if empty */
    size_t size;               /* bytes */
};

/* Maps `path` read-only. Returns IG_OK, or IG_E_IO after printing one line
 * with the path and strerror(errno) (missing file, directory, no access). */
int ig_map_file(const char *path, struct ig_mapped_file *out);

/* Unmaps; safe on a zeroed struct. */
void ig_unmap_file(struct ig_mapped_file *f);

#endif
