#include "artifact_check.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace torchwork {

const Json* Json::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  for (const auto& member : members)
    if (member.first == key) return &member.second;
  return nullptr;
}

// ------------------------------------------------------------------------------------------ JSON
namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Json document() {
    Json value = parse_value(0);
    skip_space();
    if (i_ != s_.size()) fail("trailing characters");
    return value;
  }

 private:
  const std::string& s_;
  size_t i_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("malformed JSON at byte " + std::to_string(i_) + ": " + what);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  char peek() {
    skip_space();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool take_word(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) return false;
    i_ += n;
    return true;
  }

  Json parse_value(int depth) {
    if (depth > 64) fail("nested too deeply");
    Json value;
    char c = peek();
    if (c == '{') {
      value.kind = Json::Kind::Object;
      ++i_;
      if (peek() == '}') { ++i_; return value; }
      while (true) {
        if (peek() != '"') fail("expected a key");
        std::string key = parse_string();
        expect(':');
        value.members.emplace_back(std::move(key), parse_value(depth + 1));
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return value;
      }
    }
    if (c == '[') {
      value.kind = Json::Kind::Array;
      ++i_;
      if (peek() == ']') { ++i_; return value; }
      while (true) {
        value.items.push_back(parse_value(depth + 1));
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return value;
      }
    }
    if (c == '"') {
      value.kind = Json::Kind::String;
      value.text = parse_string();
      return value;
    }
    if (take_word("true")) { value.kind = Json::Kind::Bool; value.boolean = true; return value; }
    if (take_word("false")) { value.kind = Json::Kind::Bool; return value; }
    if (take_word("null")) return value;
    size_t start = i_;
    while (i_ < s_.size() && std::strchr("+-0123456789.eE", s_[i_]) != nullptr) ++i_;
    if (start == i_) fail("unexpected character");
    value.kind = Json::Kind::Number;
    value.number = std::strtod(s_.substr(start, i_ - start).c_str(), nullptr);
    return value;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    unsigned code = std::stoul(s_.substr(i_, 4), nullptr, 16);
    i_ += 4;
    return code;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') { out += c; continue; }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          unsigned code = hex4();
          if (code >= 0xD800 && code < 0xDC00 && s_.compare(i_, 2, "\\u") == 0) {  // a surrogate pair
            i_ += 2;
            code = 0x10000 + ((code - 0xD800) << 10) + (hex4() - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default: out += e;  // \" \\ \/
      }
    }
  }
};

}  // namespace

Json parse_json(const std::string& text) { return Parser(text).document(); }

std::string json_quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') { out += '\\'; out += c; }
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else out += c;
  }
  return out + "\"";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// ------------------------------------------------------------------------------------------ SHA-256 (FIPS 180-4)
namespace {

// The constants are the fractional parts of square and cube roots of the first primes (FIPS 180-4, 4.2.2 and
// 5.3.3), computed rather than typed: the Python test compares the digests with hashlib's.
struct Constants {
  std::array<uint32_t, 64> k{};
  std::array<uint32_t, 8> h{};
  Constants() {
    int found = 0;
    for (int n = 2; found < 64; ++n) {
      bool prime = true;
      for (int d = 2; d * d <= n; ++d) prime = prime && n % d != 0;
      if (!prime) continue;
      long double cube = std::cbrt(static_cast<long double>(n));
      k[found] = static_cast<uint32_t>((cube - std::floor(cube)) * 4294967296.0L);
      if (found < 8) {
        long double root = std::sqrt(static_cast<long double>(n));
        h[found] = static_cast<uint32_t>((root - std::floor(root)) * 4294967296.0L);
      }
      ++found;
    }
  }
};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

class Sha256 {
 public:
  Sha256() {
    static const Constants constants;
    k_ = &constants.k;
    state_ = constants.h;
  }
  void update(const unsigned char* data, size_t size) {
    total_ += size;
    while (size > 0) {
      size_t take = std::min(size, 64 - used_);
      std::memcpy(block_.data() + used_, data, take);
      used_ += take;
      data += take;
      size -= take;
      if (used_ == 64) { compress(); used_ = 0; }
    }
  }
  std::string hex() {
    uint64_t bits = total_ * 8;
    unsigned char pad = 0x80;
    update(&pad, 1);
    unsigned char zero = 0;
    while (used_ != 56) update(&zero, 1);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(length, 8);
    std::string out;
    char buffer[9];
    for (uint32_t word : state_) {
      std::snprintf(buffer, sizeof buffer, "%08x", word);
      out += buffer;
    }
    return out;
  }

 private:
  const std::array<uint32_t, 64>* k_;
  std::array<uint32_t, 8> state_;
  std::array<unsigned char, 64> block_{};
  size_t used_ = 0;
  uint64_t total_ = 0;

  void compress() {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t)
      w[t] = (uint32_t(block_[4 * t]) << 24) | (uint32_t(block_[4 * t + 1]) << 16) |
             (uint32_t(block_[4 * t + 2]) << 8) | uint32_t(block_[4 * t + 3]);
    for (int t = 16; t < 64; ++t) {
      uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int t = 0; t < 64; ++t) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + (*k_)[t] + w[t];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    state_[0] += a; state_[1] += b; state_[2] += c; state_[3] += d;
    state_[4] += e; state_[5] += f; state_[6] += g; state_[7] += h;
  }
};

}  // namespace

std::string sha256_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  Sha256 digest;
  std::vector<unsigned char> buffer(1 << 20);
  while (in) {
    in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
    digest.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return digest.hex();
}

// ------------------------------------------------------------------------------------------ the artifact
namespace {

bool plain_relative(const std::string& path) {
  if (path.empty() || path[0] == '/' || path[0] == '\\') return false;
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '/'))
    if (part == "..") return false;
  return true;
}

std::string size_of(const std::string& path, bool* exists) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  *exists = static_cast<bool>(in);
  return *exists ? std::to_string(static_cast<long long>(in.tellg())) : "";
}

}  // namespace

Json check_artifact(const std::string& root) {
  std::string text;
  try {
    text = read_file(root + "/manifest.json");
  } catch (const std::exception&) {
    throw std::runtime_error("artifact " + root + ": manifest.json is missing, so this is not a (complete) "
                             "torchwork artifact; re-export the model");
  }
  Json manifest = parse_json(text);
  const Json* version = manifest.find("torchwork_artifact");
  if (version == nullptr || version->kind != Json::Kind::Number || version->number != 1)
    throw std::runtime_error("artifact " + root + ": manifest.json is not a torchwork artifact of format version 1");
  const Json* files = manifest.find("files");
  if (files == nullptr || files->kind != Json::Kind::Object || files->members.empty())
    throw std::runtime_error("artifact " + root + ": manifest.json has no file table; re-export the model");
  std::vector<std::string> problems;
  for (const auto& [relative, meta] : files->members) {
    if (!plain_relative(relative))
      throw std::runtime_error("artifact " + root + ": the file table names the path '" + relative +
                               "', which is not a plain relative path inside the artifact");
    const Json* bytes = meta.find("bytes");
    const Json* sha = meta.find("sha256");
    if (bytes == nullptr || sha == nullptr || sha->kind != Json::Kind::String) {
      problems.push_back(relative + ": no size / checksum recorded");
      continue;
    }
    bool exists = false;
    std::string size = size_of(root + "/" + relative, &exists);
    char expected[32];
    std::snprintf(expected, sizeof expected, "%.0f", bytes->number);
    if (!exists) problems.push_back(relative + ": missing");
    else if (size != expected)
      problems.push_back(relative + ": " + size + " bytes, expected " + expected + " (truncated or replaced)");
    else if (sha256_hex(root + "/" + relative) != sha->text)
      problems.push_back(relative + ": SHA-256 differs from the manifest (the file changed after export)");
  }
  if (!problems.empty()) {
    std::string joined;
    for (const auto& problem : problems) joined += (joined.empty() ? "" : "; ") + problem;
    throw std::runtime_error("artifact " + root + " is damaged: " + joined +
                             ". Re-export the model, or restore the directory from a copy.");
  }
  return manifest;
}

std::string variant_path(const Json& manifest, const std::string& root, const std::string& variant) {
  const Json* variants = manifest.find("variants");
  const Json* entry = variants ? variants->find(variant) : nullptr;
  if (entry == nullptr) {
    std::string have;
    if (variants)
      for (const auto& member : variants->members) have += (have.empty() ? "" : ", ") + member.first;
    throw std::runtime_error("artifact " + root + " has no '" + variant + "' variant (it has: " + have + ")");
  }
  const Json* file = entry->find("file");
  if (file == nullptr || file->kind != Json::Kind::String || !plain_relative(file->text) ||
      manifest.find("files")->find(file->text) == nullptr)
    throw std::runtime_error("artifact " + root + ": variant '" + variant + "' names a file the file table "
                             "does not list; the manifest is damaged: re-export the model");
  return root + "/" + file->text;
}

}  // namespace torchwork
