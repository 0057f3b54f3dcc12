/* core/mapped_file.c: read-only mmap of a whole file (POSIX).
 * Covered by tests/unit/test_core.c and every model test. */
#include "core/mapped_file.h"

#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    if (st.st_size > 0) {
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
    return IG_OK;
}

void ig_unmap_file(struct ig_mapped_file *f)
{
    if (f->data)
        munmap((void *)f->data, f->size);
    memset(f, 0, sizeof *f);
}
