#include "call_span.hpp"

#include <algorithm>
#include <stdexcept>

namespace attnbwd::perf {

double call_span_seconds(const std::vector<Activity>& acts, std::size_t flush_bytes) {
  const Activity* flush = nullptr;
  for (const Activity& a : acts)
    if (a.memset && a.bytes == flush_bytes && (!flush || a.start > flush->start)) flush = &a;
  if (!flush) throw std::runtime_error("CUPTI clock: no record of the cache flush before the call");
  std::uint64_t first = UINT64_MAX, last = 0;
  bool any = false;
  for (const Activity& a : acts) {
    if (&a == flush || a.start < flush->end) continue;
    if (a.end < a.start) throw std::runtime_error("CUPTI clock: an activity record that ends before it starts");
    first = std::min(first, a.start);
    last = std::max(last, a.end);
    any = true;
  }
  if (!any) throw std::runtime_error("CUPTI clock: no GPU activity recorded for the call");
  return static_cast<double>(last - first) * 1e-9;
}

}  // namespace attnbwd::perf
