/* core/coll_launch.c: whether a launcher started this process as one of
 * several (core/coll.h's ig_coll_launched), the same question with or
 * without MPI in the build. */
#include "core/coll.h"

#include <stdlib.h>

bool ig_coll_launched(void)
{
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n)
        n = getenv("PMI_SIZE");
    if (!n)
        n = getenv("PMIX_SIZE");
    return n && atoi(n) > 1;
}
