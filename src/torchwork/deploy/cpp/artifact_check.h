// What the C++ runner trusts about an artifact before it loads a model file: the manifest's file table
// (every file's size and SHA-256, as torchwork's Python loader checks them) and plain relative paths.
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
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;  // in file order

  const Json* find(const std::string& key) const;  // nullptr when absent or not an object
};

Json parse_json(const std::string& text);  // throws std::runtime_error on malformed input
std::string json_quote(const std::string& text);

std::string read_file(const std::string& path);  // throws std::runtime_error
std::string sha256_hex(const std::string& path);

// Refuses (std::runtime_error naming the damage) an artifact whose manifest is missing, of another format
// version, names a path outside the directory, or lists a file whose size or SHA-256 differs.
Json check_artifact(const std::string& root);

// The model file of a variant, checked to be listed in the file table.
std::string variant_path(const Json& manifest, const std::string& root, const std::string& variant);

}  // namespace torchwork
