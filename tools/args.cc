// args.cc: validators that parse the text themselves, so a bad value is reported as typed.
#include "args.h"

#include <charconv>
#include <cmath>

#include "gpu_runtime.h"
#include "problem.h"
#include "tileattn/error.h"
#include "tileattn/version.h"

namespace tileattn::cli {
namespace {

bool parse_int(const std::string& text, int64_t* value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool parse_number(const std::string& text, double* value) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && !text.empty() && std::isfinite(*value);
}

std::string show(const std::string& text) { return text.empty() ? "''" : text; }

}  // namespace

CLI::Validator positive_int() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t v;
        return parse_int(text, &v) && v > 0 ? "" : show(text) + " is not a positive integer";
      },
      "INT>0", "positive_int");
}

CLI::Validator non_negative_int() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t v;
        return parse_int(text, &v) && v >= 0 ? "" : show(text) + " is not an integer >= 0";
      },
      "INT>=0", "non_negative_int");
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v;
        return parse_number(text, &v) && v > 0 ? "" : show(text) + " is not a finite number > 0";
      },
      "NUM>0", "positive_number");
}

CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v;
        return parse_number(text, &v) && v >= 0 ? "" : show(text) + " is not a finite number >= 0";
      },
      "NUM>=0", "non_negative_number");
}

CLI::Validator one_of(std::vector<std::string> choices) {
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i)
    list += (i ? (i + 1 == choices.size() ? " or " : ", ") : "") + choices[i];
  std::string desc;
  for (size_t i = 0; i < choices.size(); ++i) desc += (i ? "|" : "") + choices[i];
  return CLI::Validator(
      [choices, list](std::string& text) -> std::string {
        for (const auto& c : choices)
          if (text == c) return "";
        return show(text) + " is not one of " + list;
      },
      desc, "one_of");
}

CLI::Validator window_pair() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto comma = text.find(',');
        int64_t l, r;
        if (comma == std::string::npos || !parse_int(text.substr(0, comma), &l) ||
            !parse_int(text.substr(comma + 1), &r) || l < -1 || r < -1)
          return show(text) + " is not L,R with integers >= -1 (-1 = unbounded)";
        return "";
      },
      "L,R", "window_pair");
}

std::pair<int64_t, int64_t> parse_window(const std::string& text) {
  const auto comma = text.find(',');
  int64_t l = -1, r = -1;
  parse_int(text.substr(0, comma), &l);
  parse_int(text.substr(comma + 1), &r);
  return {l, r};
}

void add_dtype_flag(CLI::App& app, std::string* dtype, const std::string& help) {
  app.add_option("--dtype", *dtype, help)->check(one_of({"fp32", "fp16", "bf16"}));
}

void add_device_flag(CLI::App& app, std::string* device, bool allow_auto) {
  if (allow_auto)
    app.add_option("--device", *device, "where to run: auto (the GPU when present), cpu, cuda")
        ->check(one_of({"auto", "cpu", "cuda"}))
        ->capture_default_str();
  else
    app.add_option("--device", *device, "where to run: cpu or cuda (GPU 0)")
        ->check(one_of({"cpu", "cuda"}))
        ->capture_default_str();
}

void add_kernel_flag(CLI::App& app, std::string* kernel) {
  app.add_option("--kernel", *kernel, "the tiled kernel: auto, cpu, sm80 or sm90")
      ->check(one_of({"auto", "cpu", "sm80", "sm90"}))
      ->capture_default_str();
}

Kernel parse_kernel(const std::string& name) {
  return name == "cpu"    ? Kernel::kCpuTiled
         : name == "sm80" ? Kernel::kCudaSm80
         : name == "sm90" ? Kernel::kCudaSm90
                          : Kernel::kAuto;
}

void add_threads_flag(CLI::App& app, int* threads) {
  app.add_option("--threads", *threads, "CPU threads (default: OpenMP's, OMP_NUM_THREADS or all cores)")
      ->check(positive_int());
}

Device resolve_device(const std::string& name) {
  const bool gpu_ready = built_with_cuda() && gpu::compiled() && cuda_device_count() > 0;
  if (name == "cpu" || (name == "auto" && !gpu_ready)) return Device::cpu();
  if (!gpu_ready)
    throw Error("--device", std::string("cuda: ") +
                                (built_with_cuda() ? "no CUDA device is present" : "this build has no CUDA"));
  return Device::cuda(0);
}

DType resolve_dtype(const std::string& flag, const Device& device) {
  if (!flag.empty()) return parse_dtype(flag);
  return device.kind == DeviceKind::kCUDA ? DType::kBFloat16 : DType::kFloat32;
}

std::string shape_summary(const Shape& s) {
  std::string text = "B=" + std::to_string(s.batch) + " Hq=" + std::to_string(s.heads_q) +
                     " Hkv=" + std::to_string(s.heads_kv);
  if (s.seqlen_q == s.seqlen_k)
    text += " L=" + std::to_string(s.seqlen_q);
  else
    text += " Lq=" + std::to_string(s.seqlen_q) + " Lk=" + std::to_string(s.seqlen_k);
  return text + " D=" + std::to_string(s.head_dim);
}

}  // namespace tileattn::cli
