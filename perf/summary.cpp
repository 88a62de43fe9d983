#include "summary.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace attnbwd::perf {

void Summary::print(std::FILE* out, const std::string& model, const std::string& note,
                    int wanted_iters) const {
  // Groups in first-seen order, so the table follows the run.
  std::vector<std::pair<std::string, std::string>> order;
  std::map<std::pair<std::string, std::string>, std::vector<const Outcome*>> groups;
  for (const Outcome& o : outcomes_) {
    const auto key = std::make_pair(o.op, o.backend);
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&o);
  }
  std::fprintf(out, "\n== attnbwd perf summary: E = T_SOL / T (median), %s\n", model.c_str());
  if (!note.empty()) std::fprintf(out, "   note: %s\n", note.c_str());
  std::fprintf(out, "%-29s %-9s %6s %11s %9s %9s\n", "op", "backend", "ran", "geomean E", "min E",
               "max E");
  for (const auto& key : order) {
    const auto& list = groups.at(key);
    double log_sum = 0, lo = INFINITY, hi = 0;
    int ran = 0, short_runs = 0;
    std::string first_skip;
    for (const Outcome* o : list) {
      if (!o->ran) {
        if (first_skip.empty()) first_skip = o->message;
        continue;
      }
      ++ran;
      log_sum += std::log(o->efficiency);
      lo = std::min(lo, o->efficiency);
      hi = std::max(hi, o->efficiency);
      if (o->iters < wanted_iters) ++short_runs;
    }
    const std::string count = std::to_string(ran) + "/" + std::to_string(list.size());
    if (ran > 0) {
      std::fprintf(out, "%-29s %-9s %6s %11.4g %9.4g %9.4g", key.first.c_str(), key.second.c_str(),
                   count.c_str(), std::exp(log_sum / ran), lo, hi);
    } else {
      std::fprintf(out, "%-29s %-9s %6s %11s %9s %9s", key.first.c_str(), key.second.c_str(),
                   count.c_str(), "-", "-", "-");
    }
    if (short_runs > 0) std::fprintf(out, "  (%d with < %d timed calls)", short_runs, wanted_iters);
    if (!first_skip.empty()) std::fprintf(out, "  skipped: %s", first_skip.c_str());
    std::fprintf(out, "\n");
  }
  if (order.empty()) std::fprintf(out, "(nothing ran)\n");
}

}  // namespace attnbwd::perf
