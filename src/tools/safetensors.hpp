// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//   [8-byte little-endian header length N][N bytes of JSON header][data section]
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string -> string map.
//
// Reading is strict, as the reference Rust implementation is: the tensors' byte ranges must tile the
// data section exactly (no gaps, no overlaps, no trailing bytes). Only the four dtypes the library
// uses are accepted. Assumes a little-endian host (x86-64, AArch64), as the format does.
#pragma once

#include <map>
#include <string>

#include "tools/tensor_set.hpp"

namespace attnbwd::tools {

using Metadata = std::map<std::string, std::string>;

// Throws attnbwd::Error(path, ...) naming the tensor when the file is malformed or unreadable.
TensorSet read_safetensors(const std::string& path, Metadata* metadata = nullptr);

// Writes tensors in set order; pads the header with spaces so the data section is 8-byte aligned.
void write_safetensors(const std::string& path, const TensorSet& set, const Metadata& metadata = {});

}  // namespace attnbwd::tools
