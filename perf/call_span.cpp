#include "call_span.hpp"

#include <algorithm>
#include <stdexcept>

namespace attnbwd::perf {

namespace {
const Activity* find_flush(const std::vector<Activity>& acts, std::size_t flush_bytes) {
  const Activity* flush = nullptr;
  for (const Activity& a : acts)
    if (a.memset && a.bytes == flush_bytes && (!flush || a.start > flush->start)) flush = &a;
  return flush;
}
}  // namespace

std::vector<Activity> call_activities(const std::vector<Activity>& acts, std::size_t flush_bytes) {
  std::vector<Activity> out;
  const Activity* flush = find_flush(acts, flush_bytes);
  if (!flush) return out;
  for (const Activity& a : acts)
    if (&a != flush && a.start >= flush->end) out.push_back(a);
  std::stable_sort(out.begin(), out.end(), [](const Activity& x, const Activity& y) { return x.start < y.start; });
  return out;
}

double call_span_seconds(const std::vector<Activity>& acts, std::size_t flush_bytes) {
  const Activity* flush = find_flush(acts, flush_bytes);
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
