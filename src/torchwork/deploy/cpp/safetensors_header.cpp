#include "safetensors_header.h"

#include <cstdint>
#include <map>
#include <stdexcept>

#include "artifact_check.h"

namespace torchwork {

namespace {

// The safetensors format's own bound on its header (the reference reader refuses more than 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kMaxRank = 64;

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  std::string quoted = json_quote(path);
  throw std::runtime_error(quoted.substr(1, quoted.size() - 2) + ": " + what);
}

// The number of elements of `shape`: 0 when a dim is 0, refused when the product of the others overflows
// int64 (torch computes it again, and a zero-sized tensor of absurd dims is no input either).
// A value from the header, for a message.
std::string describe(const Json& value) {
  if (value.kind == Json::Kind::Number) return value.text;
  if (value.kind == Json::Kind::String) return json_quote(value.text);
  switch (value.kind) {
    case Json::Kind::Array: return "a list";
    case Json::Kind::Object: return "an object";
    case Json::Kind::Bool: return value.boolean ? "true" : "false";
    default: return "null";
  }
}

uint64_t element_count(const std::vector<int64_t>& shape, bool* overflow) {
  uint64_t count = 1;
  bool empty = false;
  *overflow = false;
  for (int64_t dim : shape) {
    if (dim == 0) empty = true;
    else if (__builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count) || count > INT64_MAX)
      *overflow = true;
  }
  return empty ? 0 : count;
}

TensorEntry read_entry(const std::string& name, const Json& entry, uint64_t data_start, uint64_t data_size,
                       const std::string& path) {
  std::string tensor = "tensor " + json_quote(name);
  const Json* dtype = entry.find("dtype");
  const Json* shape = entry.find("shape");
  const Json* offsets = entry.find("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr)
    refuse(path, tensor + " lacks one of dtype, shape and data_offsets in the header");
  if (dtype->kind != Json::Kind::String || dtype_bytes(dtype->text) == 0)
    refuse(path, tensor + " has the dtype " + describe(*dtype) +
                     ", not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL");
  if (shape->kind != Json::Kind::Array || shape->items.size() > kMaxRank)
    refuse(path, tensor + " has a shape that is not a list of at most 64 dims");
  TensorEntry out{name, dtype->text, {}, 0, 0};
  for (const Json& dim : shape->items) {
    uint64_t value = 0;
    if (!as_count(dim, &value))
      refuse(path, tensor + " has the dim " + describe(dim) + " in its shape, not a whole number from 0 "
                            "to 2^53");
    out.shape.push_back(static_cast<int64_t>(value));  // <= 2^53: exact
  }
  bool overflow = false;
  uint64_t count = element_count(out.shape, &overflow), bytes = 0;
  if (overflow || __builtin_mul_overflow(count, static_cast<uint64_t>(dtype_bytes(out.dtype)), &bytes))
    refuse(path, tensor + " has a shape of more elements than fit in memory");
  uint64_t begin = 0, end = 0;
  if (offsets->kind != Json::Kind::Array || offsets->items.size() != 2 || !as_count(offsets->items[0], &begin) ||
      !as_count(offsets->items[1], &end))
    refuse(path, tensor + " has data_offsets that are not two whole numbers from 0 to 2^53");
  std::string range = "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end) refuse(path, tensor + " has data_offsets " + range + " that end before they begin");
  if (end > data_size)  // data_size = file size - data_start: no sum here that could wrap
    refuse(path, tensor + " has data_offsets " + range + " outside the file's " + std::to_string(data_size) +
                     " bytes of data (truncated or forged)");
  if (end - begin != bytes)
    refuse(path, tensor + " has data_offsets of " + std::to_string(end - begin) + " bytes, but its dtype and "
                          "shape need " + std::to_string(bytes));
  out.offset = static_cast<size_t>(data_start + begin);  // <= the file's size
  out.bytes = static_cast<size_t>(bytes);
  return out;
}

}  // namespace

size_t dtype_bytes(const std::string& code) {
  static const std::map<std::string, size_t> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2},
                                                      {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
                                                      {"U8", 1},  {"BOOL", 1}};
  auto found = sizes.find(code);
  return found == sizes.end() ? 0 : found->second;
}

std::vector<TensorEntry> safetensors_entries(const std::string& file, const std::string& path) {
  if (file.size() < 8)
    refuse(path, "not a safetensors file (" + std::to_string(file.size()) + " bytes; one starts with an 8-byte "
                 "header length)");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(file[i]);
  if (header_size > file.size() - 8 || header_size > kMaxHeaderBytes)
    refuse(path, "the header length is " + std::to_string(header_size) + " bytes, but the file holds " +
                     std::to_string(file.size() - 8) + " after it (truncated, or not a safetensors file)");
  Json header;
  try {
    header = parse_json(file.substr(8, header_size));
  } catch (const std::runtime_error& error) {
    refuse(path, std::string("the header is not valid JSON (") + error.what() + ")");
  }
  if (header.kind != Json::Kind::Object) refuse(path, "the header is not a JSON object");
  const uint64_t data_start = 8 + header_size;
  std::vector<TensorEntry> entries;
  for (const auto& [name, entry] : header.members) {
    if (name == "__metadata__") continue;
    if (entry.kind != Json::Kind::Object) refuse(path, "tensor " + json_quote(name) + " has no header entry");
    entries.push_back(read_entry(name, entry, data_start, file.size() - data_start, path));
  }
  return entries;
}

}  // namespace torchwork
