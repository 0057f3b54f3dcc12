/* tests/emu/test_emu_overrun.cc: a kernel that writes one element past a
 * shared array must be stopped by AddressSanitizer (the emulator gives each
 * shared declaration its own exact-size heap buffer). ctest expects ASan's
 * report in the output. Label emu. */
#include "devkit/intrinsics.cuh"

__global__ void overrun_kernel(int n)
{
    IG_SHARED(float, s, [32]);
    float *p = &s[0]; /* through a pointer: UBSan's bounds check cannot see it */
    p[threadIdx.x + (unsigned)n] = 1.0f;
}

int main(void)
{
    return IG_LAUNCH(overrun_kernel, dim3(1), dim3(32), 0, 0, 1) ? 1 : 0;
}
