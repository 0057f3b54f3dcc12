/* tests/emu/test_flash_attn_mutants.cc: the prefill kernel with one bug
 * planted at a time (copies made by tests/emu/mutate.cmake at build time)
 * must be caught by the emulator: without its cp.async wait it reads data
 * still in flight; without the barrier that ends an iteration, cp.async
 * overwrites a stage other warps still read; without the swizzle, ldmatrix
 * has bank conflicts. Label emu. */
#include "emu/emu.h"
#include "prefill/flash_attn.h"
#include "tests/emu/attn_case.h"
#include "tests/test.h"

extern "C" int prefill_attn_emu_no_wait(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_no_barrier(const struct prefill_attn_params *p, void *stream);
extern "C" int prefill_attn_emu_no_swizzle(const struct prefill_attn_params *p, void *stream);

/* Runs a mutant on a case long enough (3+ K/V tiles) for each bug to bite. */
static int run(int (*fn)(const struct prefill_attn_params *, void *))
{
    struct attn_case c;
    memset(&c, 0, sizeof c);
    c.n = 150, c.pos0 = 50, c.n_head = 1, c.n_head_kv = 1, c.hd = 64, c.dtype = PREFILL_ATTN_BF16;
    c.seed = 5;
    attn_case_init(&c);
    struct prefill_attn_params p = attn_case_params(&c, c.qkv, c.kc, c.vc, c.o, c.lse);
    ig_emu_set_quiet(1);
    int rc = fn(&p, NULL);
    ig_emu_set_quiet(0);
    attn_case_free(&c);
    return rc;
}

int main(void)
{
    CHECK(run(prefill_attn_emu_no_wait) != 0);
    CHECKF(strstr(ig_emu_last_error(), "still in flight") != NULL, "%s", ig_emu_last_error());
    CHECK(run(prefill_attn_emu_no_barrier) != 0);
    CHECKF(strstr(ig_emu_last_error(), "race") != NULL, "%s", ig_emu_last_error());
    CHECK(run(prefill_attn_emu_no_swizzle) == 0);
    CHECKF(ig_emu_last_stats().ldmatrix_conflicts > 0, "%llu",
           (unsigned long long)ig_emu_last_stats().ldmatrix_conflicts);
    return test_summary("test_flash_attn_mutants");
}
