/* tests/gpu/cuda_check.h: what the GPU tests that call the CUDA runtime
 * directly share: CK(call), which ends the test on a failed call, and a
 * device copy of a host buffer. */
#ifndef IGNITE_TESTS_GPU_CUDA_CHECK_H
#define IGNITE_TESTS_GPU_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,  \
                    cudaGetErrorString(e_));                                    \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

/* cudaMalloc + copy of bytes from host. */
static inline void *test_to_device(const void *host, size_t bytes)
{
    void *d = NULL;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

#endif
