/* core/timer.h: a monotonic clock for TTFT and tokens/s. */
#ifndef IGNITE_CORE_TIMER_H
#define IGNITE_CORE_TIMER_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC; only differences are meaningful. */
static inline int64_t ig_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
