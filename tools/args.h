// args.h: the tool's flag validators and shared flags; every message names the value and what was expected.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shape.h"
#include "tileattn/options.h"
#include "tileattn/tensor.h"

namespace tileattn::cli {

// Validators for CLI11 options; CLI11 prefixes the flag: "--head-dim: 0 is not a positive integer".
CLI::Validator positive_int();
CLI::Validator non_negative_int();
CLI::Validator positive_number();
CLI::Validator non_negative_number();
CLI::Validator one_of(std::vector<std::string> choices);
CLI::Validator window_pair();  // "L,R", integers >= -1

std::pair<int64_t, int64_t> parse_window(const std::string& text);  // after window_pair() passed

// Flags several subcommands share, bound to the given variables.
void add_dtype_flag(CLI::App& app, std::string* dtype, const std::string& help);
void add_device_flag(CLI::App& app, std::string* device, bool allow_auto);
void add_threads_flag(CLI::App& app, int* threads);
// --kernel: auto, cpu, sm80 or sm90 (the tiled path's kernel; Options::kernel).
void add_kernel_flag(CLI::App& app, std::string* kernel);
Kernel parse_kernel(const std::string& name);  // after add_kernel_flag's check passed

// "cpu", "cuda" or "auto" (the GPU when this build has CUDA and one is present, else the CPU).
// Throws tileattn::Error naming --device when CUDA was asked for and cannot be had.
Device resolve_device(const std::string& name);

// The working dtype: the flag when given, else bf16 on a GPU and fp32 on the CPU.
DType resolve_dtype(const std::string& flag, const Device& device);

// "B=1 Hq=32 Hkv=32 Lq=2048 Lk=2048 D=128" (Lq and Lk as L= when equal).
std::string shape_summary(const Shape& shape);

}  // namespace tileattn::cli
