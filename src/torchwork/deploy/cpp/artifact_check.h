// What the C++ runner trusts about an artifact before it loads a model file: the manifest's file table
// (every file's size and SHA-256, as torchwork's Python loader checks them), plain relative paths that resolve
// inside the artifact, and regular files only (a link out, a FIFO or a device is refused before it is read).
// No torch headers here, so this file compiles in seconds.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torchwork {

// A parsed JSON value (the manifest, a safetensors header).
struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string text;  // a string's value, or a number's literal as written (see as_count)
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in file order

  const Json* find(const std::string& key) const;  // nullptr when absent or not an object
};

Json parse_json(const std::string& text);  // throws std::runtime_error on malformed input
std::string json_quote(const std::string& text);

// The largest integer a JSON number keeps exactly when read as a double (2^53): sizes, offsets and dims above
// it are refused rather than rounded.
constexpr uint64_t kMaxExactInteger = uint64_t{1} << 53;

// Whether `value` is a number written as a non-negative integer (no sign, fraction or exponent) of at most
// kMaxExactInteger; the integer in *out. Nothing is cast from a double, so no value is out of range.
bool as_count(const Json& value, uint64_t* out);

std::string sha256_hex(const void* data, size_t size);  // FIPS 180-4, lowercase hex

// The bytes of `path`, opened without blocking and checked with fstat to be a regular file of at most
// max_bytes (a FIFO, a device such as /dev/zero or a directory is refused before anything is read).
// Links are followed: the caller named the path. Throws std::runtime_error saying what is wrong.
std::string read_regular(const std::string& path, uint64_t max_bytes);

// Refuses (std::runtime_error naming the damage) an artifact whose manifest is missing, of another format
// version, names a path outside the directory (by name, or through a link), lists a file that is not a
// regular file, or a file whose size or SHA-256 differs.
Json check_artifact(const std::string& root);

// The model file of a variant, checked to be listed in the file table.
std::string variant_path(const Json& manifest, const std::string& root, const std::string& variant);

// The bytes of a file the file table lists (at most max_bytes), checked again as check_artifact checks it.
std::string read_listed(const Json& manifest, const std::string& root, const std::string& relative,
                        uint64_t max_bytes);

}  // namespace torchwork
