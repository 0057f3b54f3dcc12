/* tests/emu/test_device_emu.c: the emulated device layer (device/device_emu.cc):
 * one device named "emulator", memory round trips, an absurd allocation
 * failing cleanly, no graphs (begin refuses, callers launch directly), a
 * host timer, and dev_gemm_f16 on ragged shapes against a double reference
 * (tests/emu/device_checks.h). Label emu. */
#include "tests/emu/device_checks.h"

int main(void)
{
    CHECK(IG_DEV(dev_count)() == 1);
    struct dev *d = NULL;
    fprintf(stderr, "(a missing-device line is expected next)\n");
    CHECK(IG_DEV(dev_open)(1, &d) == IG_E_DEVICE && d == NULL);
    CHECK(IG_DEV(dev_open)(0, &d) == IG_OK && d);
    if (!d)
        return test_summary("test_device_emu");

    struct dev_info info;
    IG_DEV(dev_get_info)(d, &info);
    CHECK(strcmp(info.name, "emulator") == 0);
    CHECK(info.index == 0 && info.mem_total > 0 && info.mem_free <= info.mem_total);

    dc_check_memory(d);
    dc_check_absurd_alloc(d);

    CHECK(IG_DEV(dev_graph_begin)(d) == IG_E_DEVICE);
    IG_DEV(dev_graph_free)(NULL);

    double ms = -1;
    CHECK(IG_DEV(dev_timer_start)(d) == IG_OK);
    /* f32 sums in column order: within (cols + 2) f32 roundings per addend */
    dc_check_gemms(d, 0x1p-24, "emu");
    CHECK(IG_DEV(dev_timer_stop)(d, &ms) == IG_OK);
    CHECK(ms > 0 && ms < 600e3);
    fprintf(stderr, "emu: GEMMs took %.1f ms of host time\n", ms);

    IG_DEV(dev_close)(d);
    IG_DEV(dev_close)(NULL);
    return test_summary("test_device_emu");
}
