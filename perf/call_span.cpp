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

// The activities of acts that are the call's by the rule (every one but the flush that starts once it has ended), in
// start order.
std::vector<Activity> after_flush(const std::vector<Activity>& acts, const Activity& flush) {
  std::vector<Activity> out;
  for (const Activity& a : acts)
    if (&a != &flush && a.start >= flush.end) out.push_back(a);
  std::stable_sort(out.begin(), out.end(), [](const Activity& x, const Activity& y) { return x.start < y.start; });
  return out;
}
}  // namespace

std::vector<Activity> call_activities(const std::vector<Activity>& acts, std::size_t flush_bytes) {
  const Activity* flush = find_flush(acts, flush_bytes);
  return flush ? after_flush(acts, *flush) : std::vector<Activity>{};
}

double call_span_seconds(const std::vector<Activity>& acts, std::size_t flush_bytes) {
  const Activity* flush = find_flush(acts, flush_bytes);
  if (!flush) throw std::runtime_error("CUPTI clock: no record of the cache flush before the call");
  const std::vector<Activity> call = after_flush(acts, *flush);
  if (call.empty()) throw std::runtime_error("CUPTI clock: no GPU activity recorded for the call");
  std::uint64_t last = 0;
  for (const Activity& a : call) {
    if (a.end < a.start) throw std::runtime_error("CUPTI clock: an activity record that ends before it starts");
    last = std::max(last, a.end);
  }
  return static_cast<double>(last - call.front().start) * 1e-9;
}

}  // namespace attnbwd::perf
