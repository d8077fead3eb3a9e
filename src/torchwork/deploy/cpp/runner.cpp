// torchwork-run: run a torchwork artifact without Python.
//
//   torchwork-run ARTIFACT_DIR [--variant pt2-aoti|torchscript] [--inputs FILE.safetensors]
//                 [--outputs FILE.safetensors] [--time 1,64] [--rounds 10] [--repeat 5] [--threads N]
//
// It refuses the artifact unless every file matches the manifest's size and SHA-256 and is a regular file inside
// the artifact (exit status 3); reads the inputs (default: the artifact's examples.safetensors; tensors named
// input_0, input_1, ...), every offset and size checked against the file (exit status 4 otherwise); loads the
// AOTInductor package (torch::inductor::AOTIModelPackageLoader) or the TorchScript file (torch::jit::load),
// runs the inputs, writes
// the outputs (output_0, ...) to a safetensors file and prints one JSON object on stdout: the outputs' shapes,
// the load time and, with --time, the seconds per call at each batch size (rows repeated from the inputs).
#include <ATen/Parallel.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "artifact_check.h"
#include "safetensors_header.h"

namespace {

using torchwork::Json;

const std::map<std::string, at::ScalarType>& dtypes() {
  static const std::map<std::string, at::ScalarType> table = {
      {"F64", at::kDouble}, {"F32", at::kFloat},  {"F16", at::kHalf},  {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool}};
  return table;
}

std::string dtype_code(at::ScalarType type) {
  for (const auto& [code, value] : dtypes())
    if (value == type) return code;
  throw std::runtime_error(std::string("no safetensors code for dtype ") + c10::toString(type));
}

constexpr uint64_t kMaxInputBytes = uint64_t{16} << 30;  // a file of inputs larger than 16 GiB is no input

// The index after the prefix (input_7 -> 7), or -1 when the rest of the name is not a plain index.
long tensor_index(const std::string& name, const std::string& prefix) {
  std::string digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) return -1;
  for (char c : digits)
    if (c < '0' || c > '9') return -1;
  return std::stol(digits);
}

// The tensors named prefix0, prefix1, ... of a safetensors file's bytes (safetensors_header.h checks every
// offset and size against the file first), in the order of their numbers.
std::vector<at::Tensor> read_safetensors(const std::string& file, const std::string& path,
                                         const std::string& prefix) {
  std::map<long, at::Tensor> found;
  for (const auto& entry : torchwork::safetensors_entries(file, path)) {
    if (entry.name.rfind(prefix, 0) != 0) continue;
    long index = tensor_index(entry.name, prefix);
    if (index < 0)
      throw std::runtime_error(path + ": tensor " + torchwork::json_quote(entry.name) + " is not named " + prefix +
                               "0, " + prefix + "1, ...");
    if (found.count(index)) throw std::runtime_error(path + ": tensor " + prefix + std::to_string(index) + " twice");
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(dtypes().at(entry.dtype)));
    if (static_cast<size_t>(tensor.nbytes()) != entry.bytes)  // safetensors_header.cpp and torch agree on sizes
      throw std::runtime_error(path + ": tensor " + torchwork::json_quote(entry.name) + ": sizes disagree");
    if (entry.bytes > 0) std::memcpy(tensor.data_ptr(), file.data() + entry.offset, entry.bytes);
    found[index] = tensor;
  }
  std::vector<at::Tensor> tensors;
  for (auto& [index, tensor] : found) {
    if (index != static_cast<long>(tensors.size()))
      throw std::runtime_error(path + ": expected " + prefix + std::to_string(tensors.size()));
    tensors.push_back(tensor);
  }
  if (tensors.empty()) throw std::runtime_error(path + " holds no tensor named " + prefix + "0");
  return tensors;
}

// The inputs: --inputs (a regular file of at most 16 GiB), else the file the manifest's "examples" names
// (default examples.safetensors), which must be listed in the file table that check_artifact verified.
std::vector<at::Tensor> read_inputs(const Json& manifest, const std::string& artifact, const std::string& inputs) {
  if (!inputs.empty()) return read_safetensors(torchwork::read_regular(inputs, kMaxInputBytes), inputs, "input_");
  const Json* examples = manifest.find("examples");
  if (examples != nullptr && examples->kind != Json::Kind::String)
    throw std::runtime_error("artifact " + artifact + ": the manifest's \"examples\" is "
                             "not a file name; re-export the model, or pass --inputs");
  std::string relative = examples ? examples->text : "examples.safetensors";
  std::string file = torchwork::read_listed(manifest, artifact, relative, kMaxInputBytes);
  return read_safetensors(file, artifact + "/" + relative, "input_");
}

void write_safetensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  std::string header = "{";
  std::vector<at::Tensor> contiguous;
  size_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    contiguous.push_back(tensors[i].detach().cpu().contiguous());
    const at::Tensor& t = contiguous.back();
    size_t size = t.numel() * t.element_size();
    std::string shape;
    for (int64_t dim : t.sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(dim);
    header += std::string(i ? "," : "") + "\"output_" + std::to_string(i) + "\":{\"dtype\":\"" +
              dtype_code(t.scalar_type()) + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + size) + "]}";
    offset += size;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary);
    uint64_t size = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((size >> (8 * i)) & 0xFF));
    out << header;
    for (const auto& t : contiguous) out.write(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    if (!out) throw std::runtime_error("cannot write " + path);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write " + path);
}

void flatten(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) out.push_back(value.toTensor());
  else if (value.isTuple()) for (const auto& item : value.toTupleRef().elements()) flatten(item, out);
  else if (value.isList()) for (const auto& item : value.toListRef()) flatten(item, out);
  else throw std::runtime_error("the model returned something other than tensors: " + value.tagKind());
}

using Model = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

Model load_model(const std::string& path, const std::string& variant) {
  if (variant == "pt2-aoti") {
    auto loader = std::make_shared<torch::inductor::AOTIModelPackageLoader>(path);
    return [loader](const std::vector<at::Tensor>& inputs) { return loader->run(inputs); };
  }
  if (variant == "torchscript") {
    auto module = std::make_shared<torch::jit::Module>(torch::jit::load(path, c10::Device("cpu")));
    module->eval();
    return [module](const std::vector<at::Tensor>& inputs) {
      std::vector<c10::IValue> arguments(inputs.begin(), inputs.end());
      std::vector<at::Tensor> outputs;
      flatten(module->forward(arguments), outputs);
      return outputs;
    };
  }
  throw std::runtime_error("variant '" + variant + "' cannot run in C++; use pt2-aoti or torchscript");
}

std::vector<at::Tensor> rows(const std::vector<at::Tensor>& inputs, int64_t count) {
  at::Tensor index = at::arange(count, at::kLong).remainder(inputs[0].size(0));
  std::vector<at::Tensor> out;
  for (const auto& t : inputs) out.push_back(t.index_select(0, index).contiguous());
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// [{"name": "output_0", "dtype": "F32", "shape": [8, 10]}, ...]; with_digest adds each tensor's bytes' SHA-256.
std::string shapes_json(const std::vector<at::Tensor>& tensors, const std::string& prefix,
                        bool with_digest = false) {
  std::string out = "[";
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string shape;
    for (int64_t dim : tensors[i].sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(dim);
    out += std::string(i ? "," : "") + "{\"name\":\"" + prefix + std::to_string(i) + "\",\"dtype\":\"" +
           dtype_code(tensors[i].scalar_type()) + "\",\"shape\":[" + shape + "]";
    if (with_digest) {
      at::Tensor bytes = tensors[i].contiguous();
      out += ",\"sha256\":\"" + torchwork::sha256_hex(bytes.data_ptr(), bytes.nbytes()) + "\"";
    }
    out += "}";
  }
  return out + "]";
}

std::string default_variant(const Json& manifest) {
  const Json* variants = manifest.find("variants");
  return variants && variants->find("pt2-aoti") ? "pt2-aoti" : "torchscript";
}

std::string first_line(const std::string& message) { return message.substr(0, message.find('\n')); }

// torchwork-run --check PATH...: each artifact directory checked as a run checks it (the file table, the default
// variant's file, the example inputs), each other path read as --inputs would be, and no model loaded. One JSON
// line a path: {"path", "ok": true, "inputs": [{name, dtype, shape, sha256 of the bytes read}]} or {"path",
// "ok": false, "error"}. Exit status 0 when every path passes, 3 otherwise.
int check_paths(const std::vector<std::string>& paths) {
  bool all = true;
  for (const auto& path : paths) {
    std::string line = "{\"path\":" + torchwork::json_quote(path);
    try {
      std::vector<at::Tensor> inputs;
      std::error_code error;
      if (std::filesystem::is_directory(path, error)) {
        Json manifest = torchwork::check_artifact(path);
        torchwork::variant_path(manifest, path, default_variant(manifest));
        inputs = read_inputs(manifest, path, "");
      } else {
        inputs = read_inputs(Json(), "", path);
      }
      line += ",\"ok\":true,\"inputs\":" + shapes_json(inputs, "input_", true);
    } catch (const std::exception& error) {
      all = false;
      line += ",\"ok\":false,\"error\":" + torchwork::json_quote(first_line(error.what()));
    }
    std::cout << line << "}" << std::endl;
  }
  return all ? 0 : 3;
}

struct Options {
  std::string artifact, variant, inputs, outputs;
  std::vector<std::string> paths;  // the positional arguments
  std::vector<int64_t> time_batches;
  int rounds = 10, repeat = 5, threads = 0;
  bool check = false, run_options = false;
};

Options parse_arguments(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      options.run_options = true;
      return argv[++i];
    };
    if (arg == "--check") options.check = true;
    else if (arg == "--variant") options.variant = value();
    else if (arg == "--inputs") options.inputs = value();
    else if (arg == "--outputs") options.outputs = value();
    else if (arg == "--rounds") options.rounds = std::stoi(value());
    else if (arg == "--repeat") options.repeat = std::stoi(value());
    else if (arg == "--threads") options.threads = std::stoi(value());
    else if (arg == "--time") {
      std::stringstream list(value());
      std::string item;
      while (std::getline(list, item, ',')) options.time_batches.push_back(std::stoll(item));
    } else if (!arg.empty() && arg[0] == '-') throw std::invalid_argument("unknown option " + arg);
    else options.paths.push_back(arg);
  }
  if (options.check) {
    if (options.paths.empty() || options.run_options)
      throw std::invalid_argument("--check takes artifact directories and safetensors files, no other option");
    return options;
  }
  if (options.paths.empty()) throw std::invalid_argument("name the artifact directory");
  if (options.paths.size() > 1)
    throw std::invalid_argument("one artifact directory, got a second: " + options.paths[1]);
  options.artifact = options.paths[0];
  if (options.rounds < 1 || options.repeat < 1 || options.threads < 0)
    throw std::invalid_argument("--rounds and --repeat must be >= 1, --threads >= 0");
  for (int64_t batch : options.time_batches)
    if (batch < 1) throw std::invalid_argument("--time takes positive batch sizes, e.g. 1,64");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_arguments(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "torchwork-run: " << error.what()
              << "\nusage: torchwork-run ARTIFACT_DIR [--variant pt2-aoti|torchscript] [--inputs F.safetensors]"
                 " [--outputs F.safetensors] [--time 1,64] [--rounds N] [--repeat N] [--threads N]\n"
                 "       torchwork-run --check ARTIFACT_DIR|F.safetensors...\n";
    return 2;
  }
  if (options.check) return check_paths(options.paths);
  Json manifest;
  std::string model_path;
  try {
    manifest = torchwork::check_artifact(options.artifact);
    if (options.variant.empty()) options.variant = default_variant(manifest);
    model_path = torchwork::variant_path(manifest, options.artifact, options.variant);
  } catch (const std::exception& error) {
    std::cerr << "torchwork-run: refused: " << error.what() << "\n";
    return 3;
  }
  try {
    if (options.threads > 0) at::set_num_threads(options.threads);
    c10::InferenceMode inference;
    std::vector<at::Tensor> inputs = read_inputs(manifest, options.artifact, options.inputs);  // before the model
    auto started = std::chrono::steady_clock::now();
    Model model = load_model(model_path, options.variant);
    double load_seconds = seconds_since(started);
    std::vector<at::Tensor> outputs = model(inputs);
    if (!options.outputs.empty()) write_safetensors(options.outputs, outputs);
    std::string timing;
    for (int64_t batch : options.time_batches) {
      std::vector<at::Tensor> batch_inputs = rows(inputs, batch);
      for (int i = 0; i < 2; ++i) model(batch_inputs);  // warm-up
      std::string samples;
      for (int round = 0; round < options.rounds; ++round) {
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < options.repeat; ++i) model(batch_inputs);
        char buffer[32];
        std::snprintf(buffer, sizeof buffer, "%.9g", seconds_since(start) / options.repeat);
        samples += (samples.empty() ? "" : ",") + std::string(buffer);
      }
      timing += (timing.empty() ? "" : ",") + ("\"" + std::to_string(batch) + "\":[" + samples + "]");
    }
    std::cout << "{\"variant\":" << torchwork::json_quote(options.variant)
              << ",\"threads\":" << at::get_num_threads() << ",\"load_seconds\":" << load_seconds
              << ",\"inputs\":" << inputs.size() << ",\"outputs\":" << shapes_json(outputs, "output_")
              << ",\"seconds_per_call\":{" << timing << "}}" << std::endl;
  } catch (const std::exception& error) {
    std::cerr << "torchwork-run: failed: " << first_line(error.what()) << "\n";
    return 4;
  }
  return 0;
}
