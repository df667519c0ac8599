// The GPU tests' skip and CUDA-call checks, shared by every gpu_*_test: a
// machine without a CUDA device (or a build without CUDA) skips each test
// with one line naming what stays untested.
#pragma once

#include <gtest/gtest.h>

#include "staging/stager.h"  // CudaDevicePresent

#if KVTIER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define KVTIER_REQUIRE_GPU(what)                                                                     \
  do {                                                                                               \
    if (!::kvtier::internal::CudaDevicePresent()) {                                                  \
      GTEST_SKIP() << "no CUDA device present (or kvtier built without CUDA): " what " untested";    \
    }                                                                                                \
  } while (0)

#if KVTIER_HAVE_CUDA
#define ASSERT_CUDA(expr)                                                                  \
  do {                                                                                     \
    const cudaError_t kvtier_e_ = (expr);                                                  \
    ASSERT_EQ(kvtier_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(kvtier_e_); \
  } while (0)
#endif
