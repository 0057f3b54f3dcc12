/* devkit/dev_entry.h: one name per device entry point, two builds.
 *
 * Every kernel launcher and device-layer function is compiled twice: by nvcc
 * for the GPU (name_cuda) and as host C++ for the emulator (name_emu). Code
 * that calls them (the CUDA backend, tests) writes IG_DEV(name) and is
 * compiled once per library: with IG_EMU_BACKEND defined it reaches the
 * emulated twins, otherwise the CUDA ones. Kernel sources see IG_EMU from
 * devkit/kernel.cuh, so they include it (or devkit/intrinsics.cuh) before
 * this header: the choice is made where this header is first read. The two
 * never meet in one program. */
#ifndef IGNITE_DEVKIT_DEV_ENTRY_H
#define IGNITE_DEVKIT_DEV_ENTRY_H

#if defined(IG_EMU) || defined(IG_EMU_BACKEND)
#define IG_DEV(name) name##_emu
#else
#define IG_DEV(name) name##_cuda
#endif

#endif
