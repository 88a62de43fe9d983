// The CUPTI clock's rule for which GPU activities are the timed call's (perf/call_span.*): the span from the earliest
// start to the latest end of the activities after the cache flush, the flush itself and earlier work left out.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "perf/call_span.hpp"

using attnbwd::perf::Activity;
using attnbwd::perf::call_activities;
using attnbwd::perf::call_span_seconds;

namespace {

constexpr std::size_t kFlush = 120u << 20;

Activity kernel(std::uint64_t start, std::uint64_t end) { return {start, end, 0, false}; }
Activity memset_of(std::uint64_t start, std::uint64_t end, std::uint64_t bytes) { return {start, end, bytes, true}; }

}  // namespace

TEST(PerfCallSpan, SpansTheCallsKernelsFromFirstStartToLastEnd) {
  // Two streams: the second kernel starts before the first ends and ends last; a gap before the third counts.
  const std::vector<Activity> acts = {memset_of(1000, 41000, kFlush), kernel(43000, 50000), kernel(44000, 61000),
                                      kernel(65000, 70000)};
  EXPECT_DOUBLE_EQ(call_span_seconds(acts, kFlush), (70000 - 43000) * 1e-9);
}

TEST(PerfCallSpan, CountsTheCallsOwnMemsetsAndCopies) {
  const std::vector<Activity> acts = {kernel(50000, 52000), memset_of(41500, 42000, 4096),
                                      memset_of(1000, 41000, kFlush), Activity{52500, 54000, 1 << 20, false}};
  EXPECT_DOUBLE_EQ(call_span_seconds(acts, kFlush), (54000 - 41500) * 1e-9);
}

TEST(PerfCallSpan, LeavesOutEarlierWorkAndAnEarlierFlush) {
  // A warm-up's kernel and flush delivered late, then this call's flush and kernel.
  const std::vector<Activity> acts = {memset_of(0, 30000, kFlush), kernel(31000, 90000),
                                      memset_of(100000, 140000, kFlush), kernel(141000, 150000)};
  EXPECT_DOUBLE_EQ(call_span_seconds(acts, kFlush), (150000 - 141000) * 1e-9);
}

TEST(PerfCallSpan, RefusesRecordsItCannotAttribute) {
  EXPECT_THROW(call_span_seconds({kernel(10, 20)}, kFlush), std::runtime_error);              // no flush
  EXPECT_THROW(call_span_seconds({memset_of(0, 10, kFlush)}, kFlush), std::runtime_error);    // no call
  EXPECT_THROW(call_span_seconds({memset_of(0, 10, kFlush), kernel(30, 20)}, kFlush),         // end < start
               std::runtime_error);
  EXPECT_THROW(call_span_seconds({}, kFlush), std::runtime_error);
}

TEST(PerfCallSpan, ListsTheCallsActivitiesInStartOrder) {
  // The timeline (ATTNBWD_PERF_TIMELINE) takes the same activities as the span: after the last flush, by start.
  const std::vector<Activity> acts = {kernel(31000, 90000), memset_of(0, 30000, kFlush), kernel(160000, 170000),
                                      memset_of(100000, 140000, kFlush), kernel(141000, 150000)};
  const std::vector<Activity> call = call_activities(acts, kFlush);
  ASSERT_EQ(call.size(), 2u);
  EXPECT_EQ(call[0].start, 141000u);
  EXPECT_EQ(call[1].start, 160000u);
  EXPECT_TRUE(call_activities({kernel(10, 20)}, kFlush).empty());  // no flush: nothing is the call's
}
