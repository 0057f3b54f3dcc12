/* core/mapped_file.c: read-only mmap of a whole file (POSIX), or (--no-mmap)
 * the file read into memory; either locked (--mlock) on request. The live
 * mappings are listed, so a range of one can be given back (ig_mapped_release).
 * Covered by tests/unit/test_core.c, every model test and
 * tests/cli/test_load_mode.sh. */
#include "core/mapped_file.h"

#include "core/status.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned map_mode; /* IG_MAP_* */

void ig_map_set_mode(unsigned flags) { map_mode = flags; }

/* The files mapped and not locked: the ranges ig_mapped_release may give
 * back (a file read into memory or locked is kept whole). */
struct map_range {
    uintptr_t a, e; /* [a, e) */
};
static struct map_range *maps;
static size_t n_maps, cap_maps;
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;

/* Lists [p, p + n); where that fails the range is only never given back. */
static void maps_add(const void *p, size_t n)
{
    pthread_mutex_lock(&maps_lock);
    if (n_maps == cap_maps) {
        size_t cap = cap_maps ? 2 * cap_maps : 16;
        struct map_range *r = realloc(maps, cap * sizeof *r);
        if (r) {
            maps = r;
            cap_maps = cap;
        }
    }
    if (n_maps < cap_maps)
        maps[n_maps++] = (struct map_range){(uintptr_t)p, (uintptr_t)p + n};
    pthread_mutex_unlock(&maps_lock);
}

static void maps_remove(const void *p)
{
    pthread_mutex_lock(&maps_lock);
    for (size_t i = 0; i < n_maps; i++)
        if (maps[i].a == (uintptr_t)p) {
            maps[i] = maps[--n_maps];
            break;
        }
    pthread_mutex_unlock(&maps_lock);
}

void ig_mapped_release(const void *p, size_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + n) & ~(page - 1);
    if (!p || a >= e)
        return;
    pthread_mutex_lock(&maps_lock); /* (held: the mapping cannot go away meanwhile) */
    for (size_t i = 0; i < n_maps; i++)
        if (maps[i].a <= (uintptr_t)p && (uintptr_t)p + n <= maps[i].e) {
            /* PROT_READ, MAP_PRIVATE: no page was ever written, so the next
             * read finds the file's bytes again */
            madvise((void *)a, e - a, MADV_DONTNEED);
            break;
        }
    pthread_mutex_unlock(&maps_lock);
}

/* The whole file into a malloc'd buffer. IG_OK, IG_E_NOMEM or IG_E_IO. */
static int read_whole(int fd, const char *path, size_t size, struct ig_mapped_file *out)
{
    unsigned char *p = malloc(size);
    if (!p)
        return ig_error(IG_E_NOMEM, "out of memory reading '%s' (%zu bytes; without --no-mmap "
                        "it is mapped instead)", path, size);
    for (size_t got = 0; got < size;) {
        ssize_t n = pread(fd, p + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = errno;
            free(p);
            return ig_error(IG_E_IO, "cannot read '%s': %s", path,
                            n < 0 ? strerror(e) : "the file got shorter while read");
        }
        got += (size_t)n;
    }
    out->data = p;
    out->read = true;
    return IG_OK;
}

int ig_map_file(const char *path, struct ig_mapped_file *out)
{
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever
     * before the check below could refuse it; a regular file ignores it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return ig_error(IG_E_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ig_error(IG_E_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ig_error(IG_E_IO, "'%s' is not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return ig_error(IG_E_IO, "'%s' is too large to map", path);
    }
    if (st.st_size > 0 && (map_mode & IG_MAP_READ)) {
        int rs = read_whole(fd, path, (size_t)st.st_size, out);
        if (rs != IG_OK) {
            close(fd);
            return rs;
        }
        out->size = (size_t)st.st_size;
    } else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ig_error(IG_E_IO, "cannot map '%s': %s", path, strerror(e));
        }
        out->data = p;
        out->size = (size_t)st.st_size;
    }
    close(fd); /* the mapping keeps the file alive */
    if (out->data && (map_mode & IG_MAP_LOCK)) {
        if (mlock(out->data, out->size) == 0)
            out->locked = true;
        else /* as llama.cpp: the run goes on, its pages may be swapped */
            ig_warn("--mlock: cannot lock '%s' (%.1f MiB) in memory: %s (raise 'ulimit -l')",
                    path, (double)out->size / 1048576.0, strerror(errno));
    }
    if (out->data && !out->read && !out->locked)
        maps_add(out->data, out->size);
    return IG_OK;
}

void ig_unmap_file(struct ig_mapped_file *f)
{
    if (f->data && !f->read && !f->locked)
        maps_remove(f->data);
    if (f->data && f->locked)
        munlock(f->data, f->size);
    if (f->data && f->read)
        free((void *)f->data);
    else if (f->data)
        munmap((void *)f->data, f->size);
    memset(f, 0, sizeof *f);
}

size_t ig_resident_bytes(const void *p, size_t n)
{
    if (!p || !n)
        return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(page - 1), e = (uintptr_t)p + n;
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (fd < 0)
        return 0;
    /* one 8-byte entry a page, bit 63: present */
    uint64_t ent[512];
    size_t present = 0;
    for (uintptr_t q = a; q < e;) {
        size_t k = (e - q + page - 1) / page;
        k = k < 512 ? k : 512;
        ssize_t got = pread(fd, ent, k * sizeof *ent, (off_t)(q / page * sizeof *ent));
        if (got <= 0)
            break;
        k = (size_t)got / sizeof *ent;
        for (size_t i = 0; i < k; i++)
            present += ent[i] >> 63;
        q += k * page;
    }
    close(fd);
    return present * page;
}

size_t ig_mapped_resident(const struct ig_mapped_file *f)
{
    if (!f->data || !f->size)
        return 0;
    return f->read ? f->size : ig_resident_bytes(f->data, f->size);
}
