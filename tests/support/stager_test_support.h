// What the stager tests share: the GPU tests' one-line skip (a machine
// without a CUDA device, or a build without CUDA, skips each test naming
// what stays untested), their CUDA-call check, and one ticket run to its end.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "staging/stager.h"
#include "support/test_support.h"  // EXPECT_OK

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

namespace kvtier::testing {

// Submits one ticket, waits until the stager is idle and returns the ticket's
// result (an empty one, with a failure recorded, if it did not finish).
inline internal::FinishedCopy RunTicket(internal::Stager* stager, internal::CopyDirection direction,
                                        const std::vector<uint8_t*>& rows, const std::vector<uint32_t>& ids,
                                        const internal::CopyChecksums& checksums, uint32_t timeout_ms) {
  auto ticket = stager->Submit(direction, rows, ids, checksums);
  EXPECT_OK(ticket.status());
  EXPECT_OK(stager->WaitIdle(timeout_ms));
  std::vector<internal::FinishedCopy> done;
  EXPECT_EQ(stager->PollFinished(&done), 1u);
  return done.empty() ? internal::FinishedCopy{} : std::move(done[0]);
}

}  // namespace kvtier::testing
