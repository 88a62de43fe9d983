#include "tools/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tools/json.hpp"

namespace attnbwd::tools {

namespace {

// The Rust implementation's limit: a larger header is corrupt or hostile, not a real file.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

std::string quoted(const std::string& name) { return "tensor \"" + name + "\": "; }

struct Entry {
  std::string name;
  std::uint64_t begin, end;
};

HostTensor parse_tensor_info(const std::string& path, const std::string& name, const Json& info,
                             std::uint64_t data_bytes, Entry& entry) {
  if (!info.is_object()) throw Error(path, quoted(name) + "header entry is not a JSON object");
  for (const auto& kv : info.as_object())
    if (kv.first != "dtype" && kv.first != "shape" && kv.first != "data_offsets")
      throw Error(path, quoted(name) + "unexpected key \"" + kv.first + "\"");
  const Json* dtype = info.find("dtype");
  const Json* shape = info.find("shape");
  const Json* offsets = info.find("data_offsets");
  if (!dtype || !shape || !offsets)
    throw Error(path, quoted(name) + "entry needs \"dtype\", \"shape\" and \"data_offsets\"");

  HostTensor t;
  if (!dtype->is_string()) throw Error(path, quoted(name) + "dtype is not a string");
  if (!dtype_from_name(dtype->as_string(), t.dtype))
    throw Error(path, quoted(name) + "unsupported dtype \"" + dtype->as_string() +
                          "\" (supported: BF16, F32, F64, I32)");

  if (!shape->is_array()) throw Error(path, quoted(name) + "shape is not an array");
  for (const Json& e : shape->as_array()) {
    if (!e.is_integer() || e.as_int() < 0)
      throw Error(path, quoted(name) + "shape entries must be non-negative integers, got " + shape->dump());
    t.shape.push_back(e.as_int());
  }
  std::uint64_t numel = 0;
  try {
    numel = static_cast<std::uint64_t>(shape_numel(t.shape, "tensor \"" + name + "\""));
  } catch (const Error& e) {
    throw Error(path, e.what());  // argument() is the file, as for every other malformed header
  }
  const std::uint64_t nbytes = numel * dtype_size(t.dtype);

  if (!offsets->is_array() || offsets->as_array().size() != 2 || !offsets->as_array()[0].is_integer() ||
      !offsets->as_array()[1].is_integer() || offsets->as_array()[0].as_int() < 0 ||
      offsets->as_array()[1].as_int() < 0)
    throw Error(path,
                quoted(name) + "data_offsets must be two non-negative integers, got " + offsets->dump());
  entry = {name, static_cast<std::uint64_t>(offsets->as_array()[0].as_int()),
           static_cast<std::uint64_t>(offsets->as_array()[1].as_int())};
  const std::string range = "[" + std::to_string(entry.begin) + "," + std::to_string(entry.end) + "]";
  if (entry.begin > entry.end) throw Error(path, quoted(name) + "data_offsets " + range + " are reversed");
  if (entry.end > data_bytes)
    throw Error(path, quoted(name) + "data_offsets " + range + " out of range: the data section has " +
                          std::to_string(data_bytes) + " bytes");
  if (entry.end - entry.begin != nbytes)
    throw Error(path, quoted(name) + "data_offsets " + range + " hold " +
                          std::to_string(entry.end - entry.begin) + " bytes, but shape " +
                          shape_string(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
                          std::to_string(nbytes));
  t.bytes.resize(nbytes);
  return t;
}

// The tensors' byte ranges must tile [0, data_bytes) exactly.
void check_tiling(const std::string& path, std::vector<Entry> entries, std::uint64_t data_bytes) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < cursor)
      throw Error(path, quoted(e.name) + "data_offsets overlap those of tensor \"" + prev->name + "\"");
    if (e.begin > cursor)
      throw Error(path, quoted(e.name) + "gap of " + std::to_string(e.begin - cursor) +
                            " unused bytes before its data_offsets");
    cursor = e.end;
    prev = &e;
  }
  if (cursor != data_bytes)
    throw Error(path, "data section has " + std::to_string(data_bytes) + " bytes but the tensors cover " +
                          std::to_string(cursor));
}

void read_exact(std::FILE* f, const std::string& path, void* dst, std::size_t n, std::uint64_t at,
                const std::string& what) {
  if (n == 0) return;
  if (std::fseek(f, static_cast<long>(at), SEEK_SET) != 0 || std::fread(dst, 1, n, f) != n)
    throw Error(path, "read failed (" + what + ")");
}

}  // namespace

TensorSet read_safetensors(const std::string& path, Metadata* metadata) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(path, std::string("cannot open for reading: ") + std::strerror(errno));
  if (std::fseek(f.get(), 0, SEEK_END) != 0) throw Error(path, "cannot seek");
  const long end = std::ftell(f.get());
  if (end < 0) throw Error(path, "cannot determine the file size");
  const auto file_bytes = static_cast<std::uint64_t>(end);

  if (file_bytes < 8)
    throw Error(path,
                "truncated: " + std::to_string(file_bytes) + " bytes, no room for the 8-byte header length");
  unsigned char len_bytes[8];
  read_exact(f.get(), path, len_bytes, 8, 0, "header length");
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len_bytes[i];
  if (header_bytes > file_bytes - 8)
    throw Error(path, "header length " + std::to_string(header_bytes) + " is beyond the end of the file (" +
                          std::to_string(file_bytes - 8) + " bytes follow the length)");
  if (header_bytes > kMaxHeaderBytes)
    throw Error(path, "header length " + std::to_string(header_bytes) + " is implausibly large");

  std::string text(header_bytes, '\0');
  read_exact(f.get(), path, text.data(), text.size(), 8, "header");
  Json header;
  try {
    header = Json::parse(text, "header");
  } catch (const Error& e) {
    throw Error(path, std::string("malformed ") + e.what());
  }
  if (!header.is_object()) throw Error(path, "header is not a JSON object");

  const std::uint64_t data_start = 8 + header_bytes;
  const std::uint64_t data_bytes = file_bytes - data_start;
  TensorSet set;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.as_object()) {
    if (name == "__metadata__") {
      if (!info.is_object()) throw Error(path, "__metadata__ is not a JSON object");
      for (const auto& [key, value] : info.as_object()) {
        if (!value.is_string()) throw Error(path, "__metadata__ value of \"" + key + "\" is not a string");
        if (metadata) (*metadata)[key] = value.as_string();
      }
      continue;
    }
    Entry entry{};
    set.add(name, parse_tensor_info(path, name, info, data_bytes, entry));
    entries.push_back(entry);
  }
  check_tiling(path, entries, data_bytes);

  for (const Entry& e : entries) {
    HostTensor& t = *set.find(e.name);
    read_exact(f.get(), path, t.bytes.data(), t.bytes.size(), data_start + e.begin,
               "tensor \"" + e.name + "\"");
  }
  return set;
}

void write_safetensors(const std::string& path, const TensorSet& set, const Metadata& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta.set(key, Json(value));
    header.set("__metadata__", std::move(meta));
  }
  std::uint64_t offset = 0;
  for (const auto& [name, t] : set) {
    if (name == "__metadata__") throw Error(path, "\"__metadata__\" is reserved and cannot name a tensor");
    const auto nbytes = static_cast<std::uint64_t>(shape_numel(t.shape, name)) * dtype_size(t.dtype);
    if (t.bytes.size() != nbytes)
      throw Error(path, quoted(name) + "holds " + std::to_string(t.bytes.size()) + " bytes, shape " +
                            shape_string(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
                            std::to_string(nbytes));
    Json info = Json::object();
    info.set("dtype", Json(dtype_name(t.dtype)));
    Json shape = Json::array();
    for (std::int64_t e : t.shape) shape.push_back(Json(e));
    info.set("shape", std::move(shape));
    Json offsets = Json::array();
    offsets.push_back(Json(static_cast<std::int64_t>(offset)));
    offsets.push_back(Json(static_cast<std::int64_t>(offset + nbytes)));
    info.set("data_offsets", std::move(offsets));
    header.set(name, std::move(info));
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + size is then a multiple of 8

  File f(std::fopen(path.c_str(), "wb"));
  if (!f) throw Error(path, std::string("cannot open for writing: ") + std::strerror(errno));
  unsigned char len_bytes[8];
  std::uint64_t n = text.size();
  for (unsigned char& b : len_bytes) b = static_cast<unsigned char>(n & 0xFF), n >>= 8;
  bool ok = std::fwrite(len_bytes, 1, 8, f.get()) == 8 &&
            std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  for (const auto& entry : set) {
    const auto& bytes = entry.second.bytes;
    // (an empty tensor's data() may be null, which fwrite must not get)
    ok = ok && (bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f.get()) == bytes.size());
  }
  if (std::fclose(f.release()) != 0) ok = false;
  if (!ok) throw Error(path, std::string("write failed: ") + std::strerror(errno));
}

}  // namespace attnbwd::tools
