/* tests/unit/test_coll_nccl.c: NCCL loaded at run time (core/coll_nccl.h)
 * where it is absent (IGNITE_NCCL naming no file, and a library without
 * NCCL's symbols: one line, IG_E_DEVICE, nothing held), and where
 * libnccl.so.2 can be loaded, its version; core/coll.h in a job of one rank
 * (broadcast, sums and the gather leave a rank's own values). No GPU is
 * needed: the all-reduce itself runs on the GPU check's machine. */
#include "core/coll.h"
#include "core/coll_nccl.h"
#include "core/status.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    struct ig_nccl *nc = NULL;
    setenv("IGNITE_NCCL", "/nonexistent/libnccl.so.2", 1);
    CHECK(ig_nccl_open(&nc) == IG_E_DEVICE && nc == NULL);
    setenv("IGNITE_NCCL", "libm.so.6", 1); /* loads, but is no NCCL */
    CHECK(ig_nccl_open(&nc) == IG_E_DEVICE && nc == NULL);
    unsetenv("IGNITE_NCCL");
    if (ig_nccl_open(&nc) == IG_OK) {
        printf("NCCL %d loaded\n", ig_nccl_version(nc));
        CHECK(ig_nccl_version(nc) >= 20000);
        ig_nccl_close(nc);
    } else {
        printf("no libnccl.so.2 here: its loading is the GPU check's\n");
    }

    CHECK(ig_coll_start(NULL, NULL) == IG_OK || ig_coll_launched());
    CHECK(ig_coll_size() == 1 && ig_coll_rank() == 0);
    float v[3] = {1.5f, -2.0f, 3.25f}, out[3] = {0};
    ig_coll_allreduce_sum(v, 3);
    CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.25f);
    int64_t mx = 7, n[1] = {3}, at[1] = {0};
    ig_coll_allreduce_max(&mx);
    CHECK(mx == 7);
    ig_coll_gatherv(v, 3, out, n, at, 0);
    CHECK(out[0] == 1.5f && out[1] == -2.0f && out[2] == 3.25f);
    ig_coll_finish();
    return test_summary("test_coll_nccl");
}
