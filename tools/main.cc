// main.cc: the tileattn tool's entry: parse, run one subcommand, map every failure to one line.
//   exit 0: done (verify: within tolerance)   1: a run failed or verify is out of tolerance
//   exit 2: a bad flag or value, or input the library rejects (tileattn::Error)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "tileattn/tileattn.h"

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Messages are printed on one line whatever the library or CLI11 put in them.
void fail_line(const std::string& message) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::fprintf(stderr, "tileattn: %s\n", line.c_str());
}

std::string version_text() {
  return std::string("tileattn ") + tileattn::version() + " (CPU SIMD " + tileattn::cpu_isa() + ", CUDA " +
         (tileattn::built_with_cuda() ? "built in" : "not built") + ")";
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  CLI::App app{
      "tileattn: exact attention, tiled (FlashAttention) against standard attention, on this machine",
      "tileattn"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1, 1);
  app.fallthrough(false);
  const std::vector<tileattn::cli::Command> commands = {
      tileattn::cli::add_demo(app), tileattn::cli::add_verify(app), tileattn::cli::add_bench(app),
      tileattn::cli::add_peak(app), tileattn::cli::add_io(app)};

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::RequiredError& e) {
    if (app.get_subcommands().empty()) {
      fail_line("a subcommand is required: demo, verify, bench, peak or io (see tileattn --help)");
      return kExitUsage;
    }
    fail_line(e.what());
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    fail_line(e.what());
    return kExitUsage;
  }

  try {
    for (const auto& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const CLI::ParseError& e) {  // checks across flags, made after parsing
    fail_line(e.what());
    return kExitUsage;
  } catch (const tileattn::Error& e) {
    fail_line(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {  // tileattn::RuntimeError, std::bad_alloc, ...
    fail_line(e.what());
    return kExitFailed;
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // setting up the flags failed: a bug, still one line
    fail_line(e.what());
    return kExitFailed;
  }
}
