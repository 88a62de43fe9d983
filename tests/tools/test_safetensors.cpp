#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "tests/common/seed.hpp"
#include "tools/safetensors.hpp"

using attnbwd::Error;
using namespace attnbwd::tools;

namespace {

// Every temporary file this test makes, removed when the test program exits.
struct TempFiles {
  std::vector<std::string> paths;
  ~TempFiles() {
    for (const auto& p : paths) std::remove(p.c_str());
  }
};
TempFiles temp_files;

std::string temp_path(const std::string& name) {
  std::string p = ::testing::TempDir() + "attnbwd_st_" + std::to_string(::getpid()) + "_" + name;
  temp_files.paths.push_back(p);
  return p;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

HostTensor random_tensor(DType d, std::vector<std::int64_t> shape, std::mt19937_64& gen) {
  HostTensor t = HostTensor::zeros(d, std::move(shape));
  for (auto& b : t.bytes) b = static_cast<unsigned char>(gen());
  return t;
}

// A file with a hand-written header: [8-byte length][header][data].
std::string write_raw(const std::string& name, const std::string& header, std::size_t data_bytes,
                      std::uint64_t length_field = UINT64_MAX) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  std::uint64_t n = length_field == UINT64_MAX ? header.size() : length_field;
  for (int i = 0; i < 8; ++i, n >>= 8) out.put(static_cast<char>(n & 0xFF));
  out << header << std::string(data_bytes, '\x7f');
  return path;
}

// Reads `path` expecting an Error naming the file whose message contains every part of `parts`.
void expect_read_error(const std::string& path, std::initializer_list<const char*> parts) {
  try {
    read_safetensors(path);
    ADD_FAILURE() << "no error reading " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), path);
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Safetensors, RoundTripIsByteExact) {
  ATTNBWD_SEED_TRACE();
  std::mt19937_64 gen(attnbwd::test::fresh_seed());
  TensorSet set;
  set.add("z_bf16", random_tensor(DType::BF16, {3, 5, 7}, gen));
  set.add("a_f32", random_tensor(DType::F32, {4, 3}, gen));
  set.add("f64_scalar", make_scalar(0.08838834764831845));
  set.add("i32", random_tensor(DType::I32, {6}, gen));
  set.add("empty", random_tensor(DType::F32, {0}, gen));
  set.add("empty_3d", random_tensor(DType::BF16, {2, 0, 3}, gen));
  set.add("f32_scalar", random_tensor(DType::F32, {}, gen));
  set.add("f64_4d", random_tensor(DType::F64, {1, 2, 1, 3}, gen));
  const Metadata meta{{"op", "out_proj_backward"}, {"seed", "42"}, {"note", "quote\" and \\ and \xC3\xA9"}};

  const std::string path = temp_path("roundtrip.safetensors");
  write_safetensors(path, set, meta);
  Metadata meta_back;
  const TensorSet back = read_safetensors(path, &meta_back);

  EXPECT_EQ(meta_back, meta);
  ASSERT_EQ(back.size(), set.size());
  auto it = back.begin();
  for (const auto& [name, t] : set) {  // same order, dtype, shape, bytes
    EXPECT_EQ(it->first, name);
    EXPECT_EQ(it->second.dtype, t.dtype) << name;
    EXPECT_EQ(it->second.shape, t.shape) << name;
    EXPECT_EQ(it->second.bytes, t.bytes) << name;
    ++it;
  }
  EXPECT_EQ(back.find("f64_scalar")->numel(), 1);
  EXPECT_EQ(scalar(back, "f64_scalar"), 0.08838834764831845);

  // Rewriting what was read reproduces the file exactly.
  const std::string path2 = temp_path("roundtrip2.safetensors");
  write_safetensors(path2, back, meta_back);
  EXPECT_EQ(slurp(path), slurp(path2));
}

TEST(Safetensors, LayoutFollowsTheFormat) {
  TensorSet set;
  HostTensor t = HostTensor::zeros(DType::F32, {2});
  t.data<float>()[0] = 1.0f;
  t.data<float>()[1] = -2.0f;
  set.add("w", t);
  const std::string path = temp_path("layout.safetensors");
  write_safetensors(path, set);
  const std::string file = slurp(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  ASSERT_EQ(file.size(), 8 + n + 8);
  EXPECT_EQ((8 + n) % 8, 0u);  // the data section starts 8-byte aligned
  const std::string header = file.substr(8, n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})");
  float values[2];
  std::memcpy(values, file.data() + 8 + n, 8);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -2.0f);
}

TEST(Safetensors, ReadsTensorsStoredOutOfHeaderOrder) {
  // Offsets need not follow header order; only the tiling matters.
  const std::string path = write_raw(
      "order.safetensors",
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})",
      8);
  Metadata meta;
  const TensorSet set = read_safetensors(path, &meta);
  EXPECT_EQ(meta.at("k"), "v");
  ASSERT_EQ(set.size(), 2u);
  EXPECT_EQ(set.begin()->first, "b");
}

TEST(Safetensors, MalformedFilesAreRejected) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  {
    const std::string path = temp_path("short.safetensors");
    std::ofstream(path, std::ios::binary) << "abc";
    expect_read_error(path, {"truncated"});
  }
  expect_read_error(write_raw("len.safetensors", "{" + ok_entry + "}", 8, 1000),
                    {"header length 1000", "beyond"});
  expect_read_error(write_raw("json.safetensors", "{" + ok_entry + ",}", 8), {"malformed header", "byte"});
  expect_read_error(write_raw("notobj.safetensors", "[1,2]", 0), {"not a JSON object"});
  expect_read_error(
      write_raw("dtype.safetensors", R"({"t":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4),
      {"\"t\"", "unsupported dtype \"F16\""});
  expect_read_error(
      write_raw("range.safetensors", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
      {"\"t\"", "out of range", "4 bytes"});
  expect_read_error(
      write_raw("mismatch.safetensors", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
      {"\"t\"", "needs 12"});
  expect_read_error(
      write_raw("reversed.safetensors", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
      {"\"t\"", "reversed"});
  expect_read_error(
      write_raw(
          "overlap.safetensors",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12),
      {"\"b\"", "overlap", "\"a\""});
  expect_read_error(
      write_raw("gap.safetensors", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
      {"\"t\"", "gap of 4"});
  expect_read_error(write_raw("trailing.safetensors", "{" + ok_entry + "}", 12), {"12 bytes", "cover 8"});
  expect_read_error(
      write_raw("negshape.safetensors", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0),
      {"\"t\"", "non-negative"});
  expect_read_error(
      write_raw("badoffs.safetensors", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
      {"\"t\"", "data_offsets"});
  expect_read_error(write_raw("nokey.safetensors", R"({"t":{"dtype":"F32","shape":[1]}})", 4),
                    {"\"t\"", "data_offsets"});
  expect_read_error(
      write_raw("extra.safetensors", R"({"t":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})", 4),
      {"\"t\"", "unexpected key \"x\""});
  expect_read_error(write_raw("meta.safetensors", R"({"__metadata__":{"k":1}})", 0),
                    {"__metadata__", "\"k\""});
  expect_read_error(temp_path("does_not_exist.safetensors"), {"cannot open"});
}

TEST(Safetensors, TruncatedDataIsRejected) {
  TensorSet set;
  set.add("big", HostTensor::zeros(DType::F64, {16}));
  const std::string path = temp_path("cut.safetensors");
  write_safetensors(path, set);
  const std::string file = slurp(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << file.substr(0, file.size() - 9);
  expect_read_error(path, {"\"big\"", "out of range"});
}

TEST(Safetensors, WriteRejectsInconsistentTensors) {
  TensorSet set;
  HostTensor t = HostTensor::zeros(DType::F32, {4});
  t.bytes.resize(10);
  set.add("t", t);
  EXPECT_THROW(write_safetensors(temp_path("bad_write.safetensors"), set), Error);
}

TEST(TensorSet, ExpectNamesTheTensor) {
  TensorSet set;
  set.add("weight", HostTensor::zeros(DType::BF16, {4, 8}));
  EXPECT_NO_THROW(expect(set, "weight", DType::BF16, {4, 8}));
  auto message = [&](const std::string& name, DType d, std::vector<std::int64_t> shape) {
    try {
      expect(set, name, d, shape);
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), name);
      return std::string(e.what());
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  EXPECT_NE(message("bias", DType::BF16, {4}).find("missing"), std::string::npos);
  EXPECT_NE(message("weight", DType::F32, {4, 8}).find("expected dtype F32, got BF16"), std::string::npos);
  EXPECT_NE(message("weight", DType::BF16, {8, 4}).find("expected shape [8,4], got [4,8]"),
            std::string::npos);
  EXPECT_THROW(set.add("weight", HostTensor::zeros(DType::F32, {1})), Error);
  EXPECT_THROW(set.find("weight")->data<float>(), Error);
  EXPECT_NO_THROW(expect_rank(set, "weight", DType::BF16, 2));
  EXPECT_THROW(expect_rank(set, "weight", DType::BF16, 3), Error);
}

TEST(TensorSet, ScalarAcceptsZeroDimFloats) {
  TensorSet set;
  set.add("f64", make_scalar(0.125));
  HostTensor f32 = HostTensor::zeros(DType::F32, {});
  f32.data<float>()[0] = 1e-5f;
  set.add("f32", f32);
  set.add("vec", HostTensor::zeros(DType::F64, {1}));
  set.add("int", HostTensor::zeros(DType::I32, {}));
  EXPECT_EQ(scalar(set, "f64"), 0.125);
  EXPECT_EQ(scalar(set, "f32"), static_cast<double>(1e-5f));
  for (const char* bad : {"vec", "int", "missing"}) {
    try {
      scalar(set, bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), bad);
    }
  }
}
