// torchwork-run: run a torchwork artifact without Python.
//
//   torchwork-run ARTIFACT_DIR [--variant pt2-aoti|torchscript] [--inputs FILE.safetensors]
//                 [--outputs FILE.safetensors] [--time 1,64] [--rounds 10] [--repeat 5] [--threads N]
//
// It refuses the artifact unless every file matches the manifest's size and SHA-256 (exit status 3), loads the
// AOTInductor package (torch::inductor::AOTIModelPackageLoader) or the TorchScript file (torch::jit::load),
// runs the inputs (default: the artifact's examples.safetensors; tensors named input_0, input_1, ...), writes
// the outputs (output_0, ...) to a safetensors file and prints one JSON object on stdout: the outputs' shapes,
// the load time and, with --time, the seconds per call at each batch size (rows repeated from the inputs).
#include <ATen/Parallel.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "artifact_check.h"

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

// safetensors: an 8-byte little-endian header size, a JSON header {name: {dtype, shape, data_offsets}},
// then the bytes. Tensors come back ordered by the number after the prefix (input_0, input_1, ...).
std::vector<at::Tensor> read_safetensors(const std::string& path, const std::string& prefix) {
  std::string bytes = torchwork::read_file(path);
  if (bytes.size() < 8) throw std::runtime_error(path + " is not a safetensors file (too short)");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[i]);
  if (header_size > bytes.size() - 8) throw std::runtime_error(path + ": safetensors header size out of range");
  Json header = torchwork::parse_json(bytes.substr(8, header_size));
  const size_t data_start = 8 + header_size;
  std::map<long, at::Tensor> found;
  for (const auto& [name, entry] : header.members) {
    if (name.rfind(prefix, 0) != 0) continue;
    const Json* dtype = entry.find("dtype");
    const Json* shape = entry.find("shape");
    const Json* offsets = entry.find("data_offsets");
    if (!dtype || !shape || !offsets || offsets->items.size() != 2 || !dtypes().count(dtype->text))
      throw std::runtime_error(path + ": tensor " + name + " has an unreadable header entry");
    std::vector<int64_t> sizes;
    int64_t count = 1;
    for (const auto& dim : shape->items) {
      sizes.push_back(static_cast<int64_t>(dim.number));
      count *= sizes.back();
    }
    auto begin = static_cast<size_t>(offsets->items[0].number), end = static_cast<size_t>(offsets->items[1].number);
    at::ScalarType type = dtypes().at(dtype->text);
    if (end < begin || data_start + end > bytes.size() ||
        end - begin != static_cast<size_t>(count) * c10::elementSize(type))
      throw std::runtime_error(path + ": tensor " + name + " has data offsets that do not fit its shape");
    at::Tensor tensor = at::empty(sizes, at::TensorOptions().dtype(type));
    std::memcpy(tensor.data_ptr(), bytes.data() + data_start + begin, end - begin);
    found[std::stol(name.substr(prefix.size()))] = tensor;
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

std::string shapes_json(const std::vector<at::Tensor>& tensors) {
  std::string out = "[";
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string shape;
    for (int64_t dim : tensors[i].sizes()) shape += (shape.empty() ? "" : ",") + std::to_string(dim);
    out += std::string(i ? "," : "") + "{\"name\":\"output_" + std::to_string(i) + "\",\"dtype\":\"" +
           dtype_code(tensors[i].scalar_type()) + "\",\"shape\":[" + shape + "]}";
  }
  return out + "]";
}

struct Options {
  std::string artifact, variant, inputs, outputs;
  std::vector<int64_t> time_batches;
  int rounds = 10, repeat = 5, threads = 0;
};

Options parse_arguments(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--variant") options.variant = value();
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
    else if (options.artifact.empty()) options.artifact = arg;
    else throw std::invalid_argument("one artifact directory, got a second: " + arg);
  }
  if (options.artifact.empty()) throw std::invalid_argument("name the artifact directory");
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
                 " [--outputs F.safetensors] [--time 1,64] [--rounds N] [--repeat N] [--threads N]\n";
    return 2;
  }
  Json manifest;
  std::string model_path;
  try {
    manifest = torchwork::check_artifact(options.artifact);
    if (options.variant.empty()) {
      const Json* variants = manifest.find("variants");
      options.variant = variants && variants->find("pt2-aoti") ? "pt2-aoti" : "torchscript";
    }
    model_path = torchwork::variant_path(manifest, options.artifact, options.variant);
  } catch (const std::exception& error) {
    std::cerr << "torchwork-run: refused: " << error.what() << "\n";
    return 3;
  }
  try {
    if (options.threads > 0) at::set_num_threads(options.threads);
    c10::InferenceMode inference;
    auto started = std::chrono::steady_clock::now();
    Model model = load_model(model_path, options.variant);
    double load_seconds = seconds_since(started);
    std::string inputs_path = options.inputs.empty() ? options.artifact + "/examples.safetensors" : options.inputs;
    std::vector<at::Tensor> inputs = read_safetensors(inputs_path, "input_");
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
              << ",\"inputs\":" << inputs.size() << ",\"outputs\":" << shapes_json(outputs)
              << ",\"seconds_per_call\":{" << timing << "}}" << std::endl;
  } catch (const std::exception& error) {
    std::string message = error.what();
    std::cerr << "torchwork-run: failed: " << message.substr(0, message.find('\n')) << "\n";
    return 4;
  }
  return 0;
}
