/* tests/emu/expect_fault.h: EXPECT_FAULT, for emulator tests that provoke a
 * fault on purpose: the launch must fail and the emulator's message must
 * name the fault (a substring; EXPECT_FAULT2: two). Prints nothing while the launch runs. */
#ifndef IGNITE_TESTS_EMU_EXPECT_FAULT_H
#define IGNITE_TESTS_EMU_EXPECT_FAULT_H

#include "emu/emu.h"
#include "tests/test.h"

#include <string.h>

#define EXPECT_FAULT(launch, needle)                                            \
    do {                                                                        \
        ig_emu_set_quiet(1);                                                    \
        int rc_ = (launch);                                                     \
        ig_emu_set_quiet(0);                                                    \
        CHECKF(rc_ != 0 && strstr(ig_emu_last_error(), needle),                 \
               "expected a fault with \"%s\", got rc %d: %s", needle, rc_,      \
               ig_emu_last_error());                                            \
    } while (0)

/* The same, the message naming both needles. */
#define EXPECT_FAULT2(launch, needle, needle2)                                  \
    do {                                                                        \
        ig_emu_set_quiet(1);                                                    \
        int rc_ = (launch);                                                     \
        ig_emu_set_quiet(0);                                                    \
        CHECKF(rc_ != 0 && strstr(ig_emu_last_error(), needle) &&               \
                   strstr(ig_emu_last_error(), needle2),                        \
               "expected a fault with \"%s\" and \"%s\", got rc %d: %s", needle,  \
               needle2, rc_, ig_emu_last_error());                              \
    } while (0)

#endif
