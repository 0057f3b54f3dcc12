/* core/mapped_file.h: a whole file memory-mapped read-only.
 *
 * Model files are pointed into, never copied, unless the process asked to
 * read them (llama.cpp's --no-mmap: the same bytes in allocated memory). An
 * empty file maps to data == NULL, size == 0 (mmap refuses length 0). */
#ifndef IGNITE_CORE_MAPPED_FILE_H
#define IGNITE_CORE_MAPPED_FILE_H

#include <stdbool.h>
#include <stddef.h>

struct ig_mapped_file {
    const unsigned char *data; /* read-only view of the file, or NULL if empty */
    size_t size;               /* bytes */
    bool read;                 /* data is malloc'd (IG_MAP_READ), not mapped */
    bool locked;               /* mlock held (IG_MAP_LOCK) */
};

/* How ig_map_file holds the files it opens from now on, for the whole
 * process (the CLI's --no-mmap and --mlock, set before any model is read):
 * READ reads the file into allocated memory instead of mapping it; LOCK
 * locks the bytes in memory (mlock), and where the system refuses
 * (RLIMIT_MEMLOCK: `ulimit -l`) says so in one warning line and goes on, as
 * llama.cpp does. 0: mapped, not locked (the default). */
enum { IG_MAP_READ = 1, IG_MAP_LOCK = 2 };
void ig_map_set_mode(unsigned flags);

/* Maps `path` read-only (or reads it: ig_map_set_mode). Returns IG_OK,
 * IG_E_NOMEM (reading), or IG_E_IO after printing one line with the path and
 * strerror(errno) (missing file, directory, no access, a failed read). */
int ig_map_file(const char *path, struct ig_mapped_file *out);

/* Bytes of f this process has in memory now: the mapped pages present in
 * its page tables (/proc/self/pagemap; 0 where that cannot be read), or all
 * of them where f was read. For the tensor-parallel ranks' accounting. */
size_t ig_mapped_resident(const struct ig_mapped_file *f);

/* Gives back this process's pages of [p, p + n) where those bytes lie in a
 * file ig_map_file mapped (not read, not locked): whole pages inside the
 * range only, so a neighbour's bytes stay; they stay in the page cache and
 * a later read maps them again (the mapping is read-only: nothing is lost).
 * For a weight read once to make a copy (ops/packed.c), which then no longer
 * counts in the process's resident memory. A range elsewhere is left alone.
 * Thread-safe against ig_map_file and ig_unmap_file. */
void ig_mapped_release(const void *p, size_t n);

/* Bytes of the pages holding [p, p + n) that are present in this process's
 * page tables (/proc/self/pagemap; 0 where that cannot be read): what of a
 * mapped range it has in memory, for the same accounting. */
size_t ig_resident_bytes(const void *p, size_t n);

/* Unmaps (or frees), unlocking first; safe on a zeroed struct. */
void ig_unmap_file(struct ig_mapped_file *f);

#endif
