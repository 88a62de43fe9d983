// The spec's per-call time (§7) from a list of GPU activities: the span from the earliest start to the latest end of
// the call's kernels, memsets and memcpys. Pure C++ (no CUDA, no CUPTI), so the host tests check it; clock.cpp's CUPTI
// clock feeds it the records CUPTI delivered since the previous call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace attnbwd::perf {

// One GPU activity: a kernel, memset or memcpy, with its GPU start and end (ns) and, for memsets and memcpys, its
// size in bytes.
struct Activity {
  std::uint64_t start = 0, end = 0, bytes = 0;
  bool memset = false;
  // For ATTNBWD_PERF_TIMELINE (clock.cpp) only: the kernel's (mangled) name, owned by CUPTI; the stream's id.
  const char* name = nullptr;
  std::uint32_t stream = 0;
  std::int32_t grid[3] = {0, 0, 0}, cluster[3] = {0, 0, 0};  // kernels: CTAs and cluster shape
  std::int32_t smem = 0;                                       // kernels: shared memory per CTA (static + dynamic)
};

// Seconds from the earliest start to the latest end of the call's activities. The call is preceded on its stream by
// the cache flush, a memset of `flush_bytes`; the flush is the latest-starting memset of that size in `acts`, and the
// call's activities are the others that start once it has ended (everything the call launches is ordered after the
// flush; records of earlier work, delivered late, start before it). Throws std::runtime_error when there is no flush
// record, no activity of the call, or a record that ends before it starts.
double call_span_seconds(const std::vector<Activity>& acts, std::size_t flush_bytes);

// The call's activities by the same rule (those that start once the flush has ended), in start order; empty where
// there is no flush record.
std::vector<Activity> call_activities(const std::vector<Activity>& acts, std::size_t flush_bytes);

}  // namespace attnbwd::perf
