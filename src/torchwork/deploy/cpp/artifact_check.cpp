#include "artifact_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// The length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF) and its code point in *code; 0 when the bytes there are not one.
size_t utf8_sequence(const std::string& text, size_t i, unsigned* code) {
  auto byte = [&](size_t k) { return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u; };
  unsigned lead = byte(i);
  size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0) return 0;
  *code = length == 1 ? lead : lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    *code = (*code << 6) | (byte(i + k) & 0x3F);
  }
  static const unsigned smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (*code < smallest[length] || *code > 0x10FFFF || (*code >= 0xD800 && *code < 0xE000)) return 0;
  return length;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Json document() {
    for (unsigned code = 0; i_ < s_.size();) {
      size_t length = utf8_sequence(s_, i_, &code);
      if (length == 0) fail("a byte that is not UTF-8");
      i_ += length;
    }
    i_ = 0;
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
    value.kind = Json::Kind::Number;
    value.text = parse_number();
    value.number = std::strtod(value.text.c_str(), nullptr);
    return value;
  }

  size_t skip_digits() {
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ - start;
  }

  // The literal of a number, as RFC 8259 writes one: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string parse_number() {
    size_t start = i_;
    if (s_[i_] == '-') ++i_;
    size_t first = i_, whole = skip_digits();
    if (whole == 0) fail("unexpected character");
    if (whole > 1 && s_[first] == '0') fail("a number with a leading zero");
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (skip_digits() == 0) fail("a number without digits after its '.'");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (skip_digits() == 0) fail("a number without digits in its exponent");
    }
    return s_.substr(start, i_ - start);
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
    unsigned code = 0;
    for (int k = 0; k < 4; ++k) {
      int digit = hex_digit(s_[i_++]);
      if (digit < 0) fail("a \\u escape that is not 4 hex digits");
      code = code * 16 + static_cast<unsigned>(digit);
    }
    return code;
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character in a string (it must be escaped)");
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
          if (code >= 0xDC00 && code < 0xE000) fail("a \\u escape of a lone low surrogate");
          if (code >= 0xD800 && code < 0xDC00) {  // a surrogate pair
            if (s_.compare(i_, 2, "\\u") != 0) fail("a \\u escape of a lone high surrogate");
            i_ += 2;
            unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("a \\u surrogate pair without its low half");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        case '"': case '\\': case '/': out += e; break;
        default: fail("an escape JSON does not have (it has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
      }
    }
  }
};

}  // namespace

Json parse_json(const std::string& text) { return Parser(text).document(); }


// Control characters (C0, DEL, C1) escaped, bytes that are not UTF-8 replaced by U+FFFD: the result is valid
// JSON and valid UTF-8, and nothing from a file can drive the terminal it is printed on.
std::string json_quote(const std::string& text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    unsigned code = 0;
    size_t length = utf8_sequence(text, i, &code);
    if (length == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (code == '"' || code == '\\') {
      out += '\\';
      out += static_cast<char>(code);
    } else if (code < 0x20 || (code >= 0x7F && code < 0xA0)) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", code);
      out += buffer;
    } else {
      out.append(text, i, length);
    }
    i += length;
  }
  return out + "\"";
}

bool as_count(const Json& value, uint64_t* out) {
  const std::string& digits = value.text;
  if (value.kind != Json::Kind::Number || digits.empty() || digits.size() > 16) return false;  // 2^53 has 16
  uint64_t number = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;  // a sign, a fraction or an exponent
    number = number * 10 + static_cast<uint64_t>(c - '0');
  }
  if (number > kMaxExactInteger) return false;
  *out = number;
  return true;
}

// ------------------------------------------------------------------------------------------ regular files
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  return "special file";
}

// Closes its descriptor on every path out.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// `path` opened for reading without blocking (a FIFO opens at once, without a writer), then checked with fstat
// to be a regular file: the file checked is the file read. With follow_links false, a link is refused (ELOOP).
int open_regular(const std::string& path, bool follow_links, uint64_t* size) {
  int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | (follow_links ? 0 : O_NOFOLLOW);
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw std::runtime_error("cannot open " + path + " (" + std::strerror(errno) + ")");
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    std::string kind = kind_of(info.st_mode);
    ::close(fd);
    throw std::runtime_error(path + " is not a regular file (a " + kind + ")");
  }
  *size = static_cast<uint64_t>(info.st_size);
  return fd;
}

// Up to `limit` bytes from `fd`, in blocks of at most 1 MiB, calling consume(data, size) on each.
template <typename Consume>
void read_blocks(int fd, uint64_t limit, const std::string& path, Consume consume) {
  std::vector<char> buffer(static_cast<size_t>(std::min<uint64_t>(limit, 1 << 20)));
  for (uint64_t done = 0; done < limit;) {
    ssize_t got = ::read(fd, buffer.data(), static_cast<size_t>(std::min<uint64_t>(limit - done, buffer.size())));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw std::runtime_error("cannot read " + path + " (" + std::strerror(errno) + ")");
    if (got == 0) return;  // the end of the file
    consume(buffer.data(), static_cast<size_t>(got));
    done += static_cast<uint64_t>(got);
  }
}

std::string read_descriptor(int fd, uint64_t size, uint64_t max_bytes, const std::string& path) {
  if (size > max_bytes)
    throw std::runtime_error(path + " holds " + std::to_string(size) + " bytes, over the " +
                             std::to_string(max_bytes) + " it can need; it is not the file expected");
  std::string out;
  out.reserve(static_cast<size_t>(size));
  read_blocks(fd, size, path, [&out](const char* data, size_t n) { out.append(data, n); });
  return out;
}

}  // namespace

std::string read_regular(const std::string& path, uint64_t max_bytes) {
  uint64_t size = 0;
  Descriptor fd(open_regular(path, true, &size));
  return read_descriptor(fd.get(), size, max_bytes, path);
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

// The SHA-256 of the first `size` bytes of fd (fewer when the file ends first).
std::string digest_of(int fd, uint64_t size, const std::string& path) {
  Sha256 digest;
  read_blocks(fd, size, path, [&digest](const char* data, size_t n) {
    digest.update(reinterpret_cast<const unsigned char*>(data), n);
  });
  return digest.hex();
}

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  Sha256 digest;
  digest.update(static_cast<const unsigned char*>(data), size);
  return digest.hex();
}

// ------------------------------------------------------------------------------------------ the artifact
namespace {


constexpr uint64_t kMaxManifestBytes = 16 << 20;  // as torchwork.deploy.manifest.MAX_MANIFEST_BYTES
const char kNoLinks[] = "; an artifact is read only from its own regular files. Re-export the model, or copy the "
                        "artifact without links (cp -rL).";

// Text from a file, for a message: control characters escaped, so nothing reaches the terminal raw.
std::string printable(const std::string& text) {
  std::string quoted = json_quote(text);
  return quoted.substr(1, quoted.size() - 2);
}

bool plain_relative(const std::string& path) {
  if (path.empty() || path[0] == '/' || path[0] == '\\' || path.find('\0') != std::string::npos) return false;
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '/'))
    if (part == "..") return false;
  return true;
}

bool is_sha256(const Json* value) {
  return value != nullptr && value->kind == Json::Kind::String && value->text.size() == 64 &&
         std::all_of(value->text.begin(), value->text.end(), [](char c) { return hex_digit(c) >= 0; });
}

// An artifact directory, and the checks torchwork.paths.why_unsafe makes of a member before it is opened: a
// plain relative name, resolved (links followed) inside the directory, a regular file.
class Artifact {
 public:
  explicit Artifact(const std::string& root) : root_(root) {
    char* resolved = ::realpath(root.c_str(), nullptr);
    struct stat info {};
    bool directory = resolved != nullptr && ::stat(resolved, &info) == 0 && S_ISDIR(info.st_mode);
    if (resolved != nullptr) {
      prefix_ = resolved;
      std::free(resolved);
    }
    if (!directory)
      throw std::runtime_error(printable(root) + " is not a directory. An artifact is the directory written by "
                               "`torchwork export`.");
    if (prefix_.back() != '/') prefix_ += '/';
  }

  [[noreturn]] void refuse(const std::string& what) const {
    throw std::runtime_error("artifact " + printable(root_) + ": " + what);
  }

  std::string path(const std::string& relative) const { return root_ + "/" + relative; }

  // The member's resolved path, "" when nothing is there (the caller says it is missing); throws when unsafe.
  std::string member(const std::string& relative, const std::string& what) const {
    if (!plain_relative(relative))
      refuse(what + " names the path " + json_quote(relative) + ", which is not a plain relative path inside "
             "the artifact. The manifest is damaged or forged: re-export the model.");
    struct stat link {};
    if (::lstat(path(relative).c_str(), &link) != 0) return "";
    std::string problem, real;
    if (char* resolved = ::realpath(path(relative).c_str(), nullptr)) {
      real = resolved;
      std::free(resolved);
    } else {
      problem = errno == ENOENT ? std::string("is a symlink to nothing")
                                : std::string("cannot be resolved (") + std::strerror(errno) + ")";
    }
    struct stat info {};
    if (problem.empty() && real.compare(0, prefix_.size(), prefix_) != 0)
      problem = "leads outside the folder (to " + printable(real) + ")";
    else if (problem.empty() && (::stat(real.c_str(), &info) != 0 || !S_ISREG(info.st_mode)))
      problem = "is not a regular file (a " + kind_of(info.st_mode) + ")";
    if (!problem.empty()) refuse(printable(relative) + " " + problem + kNoLinks);
    return real;
  }

  // The member opened for reading (its size in *size), -1 when it does not exist. O_NOFOLLOW on the resolved
  // path: a link swapped in after the check is refused, not followed.
  int open(const std::string& relative, const std::string& what, uint64_t* size) const {
    std::string real = member(relative, what);
    if (real.empty()) return -1;
    try {
      return open_regular(real, false, size);
    } catch (const std::runtime_error& error) {
      refuse(printable(relative) + ": " + error.what() + kNoLinks);
    }
  }

 private:
  std::string root_, prefix_;
};

Json read_manifest(const Artifact& artifact) {
  uint64_t size = 0;
  int fd = artifact.open("manifest.json", "the manifest", &size);
  if (fd < 0)
    artifact.refuse("manifest.json is missing, so this is not a (complete) torchwork artifact; re-export the model");
  Descriptor closing(fd);
  if (size > kMaxManifestBytes)
    artifact.refuse("manifest.json holds " + std::to_string(size) + " bytes, over the " +
                    std::to_string(kMaxManifestBytes) + " a manifest can need; it is damaged or forged: re-export "
                    "the model");
  std::string text = read_descriptor(fd, size, kMaxManifestBytes, artifact.path("manifest.json"));
  try {
    return parse_json(text);
  } catch (const std::runtime_error& error) {
    artifact.refuse(std::string("manifest.json is not valid JSON (") + error.what() + "); re-export the model");
  }
}

// "" when the listed file has the recorded size and SHA-256, else what differs.
std::string file_problem(const Artifact& artifact, const std::string& relative, const Json& meta) {
  const Json* bytes = meta.find("bytes");
  const Json* sha = meta.find("sha256");
  uint64_t expected = 0;
  if (bytes == nullptr || !as_count(*bytes, &expected) || !is_sha256(sha))
    return "no size / checksum recorded (bytes: a whole number, sha256: 64 hex digits)";
  uint64_t size = 0;
  int fd = artifact.open(relative, "the file table", &size);
  if (fd < 0) return "missing";
  Descriptor closing(fd);
  if (size != expected)
    return std::to_string(size) + " bytes, expected " + std::to_string(expected) + " (truncated or replaced)";
  if (digest_of(fd, size, artifact.path(relative)) != sha->text)
    return "SHA-256 differs from the manifest (the file changed after export)";
  return "";
}

}  // namespace

Json check_artifact(const std::string& root) {
  Artifact artifact(root);
  Json manifest = read_manifest(artifact);
  const Json* version = manifest.find("torchwork_artifact");
  if (version == nullptr || version->kind != Json::Kind::Number || version->number != 1)
    artifact.refuse("manifest.json is not a torchwork artifact of format version 1");
  const Json* files = manifest.find("files");
  if (files == nullptr || files->kind != Json::Kind::Object || files->members.empty())
    artifact.refuse("manifest.json has no file table; re-export the model");
  for (const auto& entry : files->members) artifact.member(entry.first, "the file table");  // all, before reading
  std::vector<std::string> problems;
  for (const auto& [relative, meta] : files->members) {
    std::string problem = file_problem(artifact, relative, meta);
    if (!problem.empty()) problems.push_back(printable(relative) + ": " + problem);
  }
  if (!problems.empty()) {
    std::string joined;
    for (const auto& problem : problems) joined += (joined.empty() ? "" : "; ") + problem;
    throw std::runtime_error("artifact " + printable(root) + " is damaged: " + joined +
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
      for (const auto& member : variants->members) have += (have.empty() ? "" : ", ") + printable(member.first);
    throw std::runtime_error("artifact " + printable(root) + " has no '" + printable(variant) +
                             "' variant (it has: " + have + ")");
  }
  const Json* file = entry->find("file");
  if (file == nullptr || file->kind != Json::Kind::String || !plain_relative(file->text) ||
      manifest.find("files")->find(file->text) == nullptr)
    throw std::runtime_error("artifact " + printable(root) + ": variant '" + printable(variant) +
                             "' names a file the file table does not list; the manifest is damaged: re-export "
                             "the model");
  return root + "/" + file->text;
}

std::string read_listed(const Json& manifest, const std::string& root, const std::string& relative,
                        uint64_t max_bytes) {
  Artifact artifact(root);
  const Json* files = manifest.find("files");
  if (files == nullptr || files->find(relative) == nullptr)
    artifact.refuse(printable(relative) + " is not in the manifest's file table, so its checksum is unknown; "
                    "re-export the model");
  uint64_t size = 0;
  int fd = artifact.open(relative, "the file table", &size);
  if (fd < 0) artifact.refuse(printable(relative) + " is missing; re-export the model");
  Descriptor closing(fd);
  return read_descriptor(fd, size, max_bytes, artifact.path(relative));
}

}  // namespace torchwork
