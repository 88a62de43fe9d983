// Fuzzing of the strict safetensors reader: random valid files (0-4 tensors of every dtype, 0-d to
// 3-d, empty ones, optional metadata), then one corruption each:
//   truncation at a random length (must be an Error) · a wrong header-length field (N±k, 0, the file
//   size, 2^63, UINT64_MAX, random: must be an Error) · 1-3 byte flips or JSON-ish bytes inside the
//   header (an Error, or a file that still reads consistently) · a rewritten header with one field off
//   (an extent ±1, negative, huge, non-integer or a string, a dimension added or dropped, an offset
//   moved, swapped, negative or beyond int64, a dtype changed or unknown, a key missing or extra, a
//   duplicated name: the expected outcome is decided by an independent check of the format's rules)
//   · a header of random bytes, token soup, deep nesting or huge numbers.
// Every failure must be attnbwd::Error naming the file (argument() = path); nothing else may escape,
// and nothing may crash or hang. A file accepted must hold consistent tensors.
//
// Budget: ATTNBWD_FUZZ_CASES cases (default 4000), fresh seed each run; counts in the test's
// properties and on stdout.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/rng.hpp"
#include "tests/common/seed.hpp"
#include "tools/safetensors.hpp"

namespace attnbwd::test {
namespace {

using namespace attnbwd::tools;
using std::int64_t;
using std::uint64_t;

int cases() {
  if (const char* s = std::getenv("ATTNBWD_FUZZ_CASES")) return std::max(1, std::atoi(s));
  return 4000;
}

int64_t pick(Rng& r, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(r.next() % static_cast<uint64_t>(hi - lo + 1));
}
bool chance(Rng& r, double p) { return r.uniform() < p; }
template <class T>
T pick_of(Rng& r, const std::vector<T>& v) {
  return v[static_cast<std::size_t>(pick(r, 0, static_cast<int64_t>(v.size()) - 1))];
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i, n >>= 8) s[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xFF);
  return s;
}

// One header entry, as text pieces we can break one at a time.
struct Entry {
  std::string name, dtype;
  std::vector<std::string> shape;        // JSON values, normally integers
  std::string begin, end;                // JSON values of data_offsets
  std::string extra;                     // an extra key-value pair, or empty
  bool drop_dtype = false, drop_shape = false, drop_offsets = false;
};

std::string header_text(const std::vector<Entry>& entries, const std::string& metadata) {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":" + metadata;
    first = false;
  }
  for (const Entry& e : entries) {
    h += first ? "" : ",";
    first = false;
    h += "\"" + e.name + "\":{";
    std::vector<std::string> kv;
    if (!e.drop_dtype) kv.push_back("\"dtype\":\"" + e.dtype + "\"");
    if (!e.drop_shape) {
      std::string s = "\"shape\":[";
      for (std::size_t i = 0; i < e.shape.size(); ++i) s += (i ? "," : "") + e.shape[i];
      kv.push_back(s + "]");
    }
    if (!e.drop_offsets) kv.push_back("\"data_offsets\":[" + e.begin + "," + e.end + "]");
    if (!e.extra.empty()) kv.push_back(e.extra);
    for (std::size_t i = 0; i < kv.size(); ++i) h += (i ? "," : "") + kv[i];
    h += "}";
  }
  return h + "}";
}

// The format's rules, checked independently of the reader, for a file whose data section has
// `data_bytes` bytes: Valid, Invalid, or Either where the rules leave room (an integral number in
// exponent form such as 1e3, which the reader's JSON takes as an integer and serde would not; a shape
// with a zero extent and an extent beyond 2^60, whose element count is 0 however it is multiplied).
enum Outcome { Invalid, Valid, Either };
Outcome entries_valid(const std::vector<Entry>& entries, uint64_t data_bytes) {
  struct Range {
    uint64_t b, e;
  };
  std::vector<Range> ranges;
  std::vector<std::string> names;
  bool either = false;
  // A non-negative JSON integer that fits int64, in plain digits.
  auto as_u = [&](const std::string& s, uint64_t& out) {
    if (s.find_first_of("eE") != std::string::npos && s.find_first_of("-.\"") == std::string::npos) either = true;
    if (s.empty() || s.size() > 19) return false;
    for (char c : s)
      if (c < '0' || c > '9') return false;
    if (s.size() > 1 && s[0] == '0') return false;
    if (s.size() == 19 && s > "9223372036854775807") return false;
    out = std::stoull(s);
    return true;
  };
  bool valid = true;
  for (const Entry& e : entries) {
    if (e.drop_dtype || e.drop_shape || e.drop_offsets || !e.extra.empty()) return Invalid;
    for (const auto& n : names)
      if (n == e.name) return Invalid;
    names.push_back(e.name);
    uint64_t size = 0;
    if (e.dtype == "BF16") size = 2;
    else if (e.dtype == "F32" || e.dtype == "I32") size = 4;
    else if (e.dtype == "F64") size = 8;
    else return Invalid;
    std::vector<uint64_t> ext;
    bool zero = false, huge = false;
    for (const auto& s : e.shape) {
      uint64_t v = 0;
      if (!as_u(s, v)) valid = false;
      ext.push_back(v);
      zero = zero || v == 0;
      huge = huge || v > (uint64_t{1} << 60);
    }
    uint64_t numel = zero ? 0 : 1;
    if (zero && huge) either = true;
    for (uint64_t v : ext) {
      if (zero) break;
      if (v > (uint64_t{1} << 60) / numel) {  // numel * 8 bytes must fit int64
        valid = false;
        break;
      }
      numel *= v;
    }
    if (numel > (uint64_t{1} << 60) / size) valid = false;
    uint64_t b = 0, en = 0;
    if (!as_u(e.begin, b) || !as_u(e.end, en)) valid = false;
    if (b > en || en > data_bytes || en - b != numel * size) valid = false;
    ranges.push_back({b, en});
  }
  if (either) return Either;
  if (!valid) return Invalid;
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) { return x.b != y.b ? x.b < y.b : x.e < y.e; });
  uint64_t cursor = 0;
  for (const Range& r : ranges) {
    if (r.b != cursor) return Invalid;
    cursor = r.e;
  }
  return cursor == data_bytes ? Valid : Invalid;
}

struct Counts {
  int cases = 0, rejected = 0, accepted = 0, failures = 0;
};

class StFuzz {
 public:
  StFuzz(const std::string& path, Counts& counts) : path_(path), counts_(counts) {}

  void one(std::uint64_t seed) {
    Rng r(seed);
    seed_ = seed;
    // A valid starting file.
    std::vector<Entry> entries;
    std::string data;
    const int n = static_cast<int>(pick(r, 0, 4));
    const std::vector<std::string> pool = {"a", "b_1", "weight", "x y", "q.k", "\\u00e9t\\u00e9", "z"};
    std::vector<std::string> used;
    for (int i = 0; i < n; ++i) {
      Entry e;
      do e.name = pick_of(r, pool);
      while (std::find(used.begin(), used.end(), e.name) != used.end());
      used.push_back(e.name);
      e.dtype = pick_of<std::string>(r, {"BF16", "F32", "F64", "I32"});
      const uint64_t size = e.dtype == "BF16" ? 2 : e.dtype == "F64" ? 8 : 4;
      uint64_t numel = 1;
      for (int64_t k = pick(r, 0, 3); k > 0; --k) {
        const int64_t x = chance(r, 0.1) ? 0 : pick(r, 1, 4);
        e.shape.push_back(std::to_string(x));
        numel *= static_cast<uint64_t>(x);
      }
      e.begin = std::to_string(data.size());
      for (uint64_t k = 0; k < numel * size; ++k) data.push_back(static_cast<char>(r.next()));
      e.end = std::to_string(data.size());
      entries.push_back(e);
    }
    const std::string meta = chance(r, 0.3) ? "{\"op\":\"gqa_rope_backward\",\"seed\":\"7\"}" : "";

    auto file = [&](const std::string& header, uint64_t length_field) {
      std::string h = header;
      return le64(length_field) + h + data;
    };
    auto padded = [&](std::string h) {
      h.append((8 - h.size() % 8) % 8, ' ');
      return h;
    };
    const std::string header = padded(header_text(entries, meta));
    const std::string good = file(header, header.size());

    std::string bytes;
    std::string what;
    enum { MustFail, MayFail, MustPass } expect = MustFail;
    switch (pick(r, 0, 4)) {
      case 0: {  // truncation
        const auto len = static_cast<std::size_t>(pick(r, 0, static_cast<int64_t>(good.size()) - 1));
        bytes = good.substr(0, len);
        what = "truncated to " + std::to_string(len) + " of " + std::to_string(good.size()) + " bytes";
        break;
      }
      case 1: {  // header length field
        const uint64_t N = header.size();
        uint64_t v = N;
        while (v == N)
          v = pick_of<uint64_t>(r, {N + 1, N - 1 > N ? 0 : N - 1, N + static_cast<uint64_t>(pick(r, 2, 40)),
                                    N >= 8 ? N - static_cast<uint64_t>(pick(r, 1, 8)) : 0, 0, good.size(),
                                    good.size() - 7, uint64_t{1} << 63, std::numeric_limits<uint64_t>::max(),
                                    100'000'001, r.next()});
        bytes = file(header, v);
        what = "header length " + std::to_string(N) + " -> " + std::to_string(v);
        break;
      }
      case 2: {  // byte flips inside the header
        bytes = good;
        what = "header bytes";
        if (header.empty()) break;
        for (int64_t k = pick(r, 1, 3); k > 0; --k) {
          const auto at = 8 + static_cast<std::size_t>(pick(r, 0, static_cast<int64_t>(header.size()) - 1));
          const char c = chance(r, 0.5) ? static_cast<char>(bytes[at] ^ static_cast<char>(pick(r, 1, 255)))
                                        : pick_of<char>(r, {'{', '}', '[', ']', '"', ':', ',', '0', '9', '-',
                                                            'e', '.', ' ', '\\', '\0', '\xff', 'n', 't'});
          what += " [" + std::to_string(at - 8) + "]=" + std::to_string(static_cast<unsigned char>(c));
          bytes[at] = c;
        }
        expect = MayFail;
        break;
      }
      case 3: {  // one field of the header off
        std::vector<Entry> es = entries;
        if (es.empty()) {
          es.push_back({"extra", "F32", {"1"}, "0", "4", "", false, false, false});
          what = "an entry with no data";
        } else {
          Entry& e = es[static_cast<std::size_t>(pick(r, 0, static_cast<int64_t>(es.size()) - 1))];
          switch (pick(r, 0, 11)) {
            case 0:
              if (!e.shape.empty()) {
                auto& s = e.shape[static_cast<std::size_t>(pick(r, 0, static_cast<int64_t>(e.shape.size()) - 1))];
                s = pick_of<std::string>(r, {std::to_string(std::stoll(s) + 1),
                                             std::to_string(std::max<int64_t>(0, std::stoll(s) - 1)), "-1",
                                             "4611686018427387904", "9223372036854775807",
                                             "18446744073709551616", "1.5", "1e3", "\"3\"", "null", "true"});
                what = "shape entry " + s;
                break;
              }
              [[fallthrough]];
            case 1:
              e.shape.push_back(pick_of<std::string>(r, {"1", "2", "0", "3"}));
              what = "shape gains a dimension";
              break;
            case 2:
              if (!e.shape.empty()) e.shape.pop_back();
              else e.shape.push_back("2");
              what = "shape loses a dimension";
              break;
            case 3:
              e.begin = pick_of<std::string>(r, {std::to_string(std::stoll(e.begin) + pick(r, 1, 8)),
                                                 std::to_string(std::stoll(e.begin) - 1), "-1", "1e2",
                                                 "99999999999999999999"});
              what = "begin offset " + e.begin;
              break;
            case 4:
              e.end = pick_of<std::string>(r, {std::to_string(std::stoll(e.end) + pick(r, 1, 8)),
                                               std::to_string(std::stoll(e.end) - 1), "-8", "null",
                                               "9223372036854775807", "18446744073709551615"});
              what = "end offset " + e.end;
              break;
            case 5:
              std::swap(e.begin, e.end);
              what = "offsets swapped";
              break;
            case 6:
              e.dtype = pick_of<std::string>(r, {"BF16", "F32", "F64", "I32", "F16", "bool", "", "f32", "U8"});
              what = "dtype " + e.dtype;
              break;
            case 7:
              e.extra = pick_of<std::string>(r, {"\"x\":1", "\"dtype\":\"F32\"", "\"offsets\":[0,0]"});
              what = "extra key " + e.extra;
              break;
            case 8:
              (chance(r, 0.33) ? e.drop_dtype : chance(r, 0.5) ? e.drop_shape : e.drop_offsets) = true;
              what = "a key missing";
              break;
            case 9: {
              what = "duplicated name " + e.name;
              const Entry copy = e;
              es.push_back(copy);  // e dangles from here on
              break;
            }
            case 10:
              if (es.size() >= 2) {
                std::swap(es[0].begin, es[1].begin);
                std::swap(es[0].end, es[1].end);
                what = "offsets of two tensors swapped";
                break;
              }
              [[fallthrough]];
            default:
              e.shape.assign(1, std::to_string(pick(r, 0, 9)));
              what = "shape [" + e.shape[0] + "]";
          }
        }
        const std::string h = padded(header_text(es, meta));
        bytes = file(h, h.size());
        const Outcome o = entries_valid(es, data.size());
        expect = o == Valid ? MustPass : o == Invalid ? MustFail : MayFail;
        what = "header field: " + what;
        break;
      }
      default: {  // a hostile header
        std::string h;
        switch (pick(r, 0, 4)) {
          case 0:
            for (int64_t k = pick(r, 0, 64); k > 0; --k) h.push_back(static_cast<char>(r.next()));
            what = "random header bytes";
            break;
          case 1: {
            const std::vector<std::string> tokens = {"{", "}", "[", "]", ":", ",", "\"a\"", "\"dtype\"", "\"F32\"",
                                                     "\"shape\"", "\"data_offsets\"", "0", "-1", "1e999", "null",
                                                     "true", "\"\\u12\"", "\"\\ud800\"", "1.0e-400", " "};
            for (int64_t k = pick(r, 1, 30); k > 0; --k) h += pick_of(r, tokens);
            what = "token soup " + h;
            break;
          }
          case 2: {
            const auto depth = static_cast<std::size_t>(pick_of<int64_t>(r, {10, 100, 1000, 100000}));
            h = "{\"a\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
            what = "nesting depth " + std::to_string(depth);
            break;
          }
          case 3:
            h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[" + std::string(static_cast<std::size_t>(pick(r, 20, 400)), '9') +
                "],\"data_offsets\":[0,0]}}";
            what = "a huge number";
            break;
          default:
            h = "{\"" + std::string(static_cast<std::size_t>(pick(r, 1, 100000)), 'k') + "\":{}}";
            what = "a long key";
        }
        bytes = file(h, h.size());
        expect = MayFail;
      }
    }
    check(bytes, what, expect);
  }

 private:
  void fail(const std::string& what, const std::string& msg) {
    if (++counts_.failures <= 20) ADD_FAILURE() << "case seed " << seed_ << " [" << what << "]: " << msg;
  }

  template <class E>
  void check(const std::string& bytes, const std::string& what, E expect) {
    spit(path_, bytes);
    ++counts_.cases;
    try {
      const TensorSet set = read_safetensors(path_);
      ++counts_.accepted;
      if (expect == 0) return fail(what, "accepted");
      // Consistent: every tensor holds numel * dtype_size bytes, together the whole data section.
      uint64_t total = 0;
      for (const auto& [name, t] : set) {
        if (t.bytes.size() != static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype))
          return fail(what, "tensor " + name + " holds the wrong number of bytes");
        total += t.bytes.size();
      }
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
      if (total != bytes.size() - 8 - n) return fail(what, "tensors do not cover the data section");
    } catch (const Error& e) {
      ++counts_.rejected;
      if (expect == 2) return fail(what, std::string("rejected a valid file: ") + e.what());
      if (e.argument() != path_) return fail(what, "Error does not name the file: " + std::string(e.what()));
    } catch (const std::exception& e) {
      fail(what, std::string("threw a non-attnbwd exception: ") + e.what());
    }
  }

  std::string path_;
  Counts& counts_;
  std::uint64_t seed_ = 0;
};

TEST(FuzzSafetensors, CorruptFilesAreErrorsNeverCrashes) {
  ATTNBWD_SEED_TRACE();
  const std::string path = ::testing::TempDir() + "attnbwd_fuzz_st_" + std::to_string(::getpid()) + ".safetensors";
  Rng master(fresh_seed(201));
  Counts counts;
  StFuzz fuzz(path, counts);
  const int n = cases();
  for (int i = 0; i < n; ++i) fuzz.one(master.next());
  std::remove(path.c_str());
  ::testing::Test::RecordProperty("cases", counts.cases);
  ::testing::Test::RecordProperty("rejected", counts.rejected);
  ::testing::Test::RecordProperty("accepted", counts.accepted);
  std::printf("[ fuzz     ] %d files: %d rejected with an Error, %d read\n", counts.cases, counts.rejected,
              counts.accepted);
  EXPECT_EQ(counts.cases, n);
  EXPECT_EQ(counts.failures, 0);
  if (n >= 500) {  // both sides are reached (about 2% of the corrupted files still read)
    EXPECT_GT(counts.rejected, n / 2);
    EXPECT_GT(counts.accepted, 0);
  }
}

}  // namespace
}  // namespace attnbwd::test
