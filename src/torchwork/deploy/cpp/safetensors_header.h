// The header of a safetensors file, checked before a byte of its data is touched: every shape and offset an
// exact non-negative integer, every size computed without overflow, every tensor's bytes inside the file's
// data region. No torch headers here; the runner maps the dtype codes to torch's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace torchwork {

// One tensor of a safetensors file: its bytes are file[offset, offset + bytes), checked to lie in the file.
struct TensorEntry {
  std::string name, dtype;  // dtype: a safetensors code (F32, I64, ...)
  std::vector<int64_t> shape;
  size_t offset = 0, bytes = 0;
};

// The bytes of one element of a safetensors dtype code; 0 for a code the runner does not read.
size_t dtype_bytes(const std::string& code);

// Every tensor of the safetensors file held in `file` (read from `path`, named in messages), in header order.
// Throws std::runtime_error naming the tensor and what is wrong with it.
std::vector<TensorEntry> safetensors_entries(const std::string& file, const std::string& path);

}  // namespace torchwork
