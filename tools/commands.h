// commands.h: the subcommands; each registers its flags on the app and returns how to run it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tileattn::cli {

struct Command {
  CLI::App* app;             // the subcommand, to ask whether it was given
  std::function<int()> run;  // the exit status: 0 done, 1 failed (or out of tolerance)
};

Command add_demo(CLI::App& app);
Command add_verify(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_peak(CLI::App& app);
Command add_io(CLI::App& app);

}  // namespace tileattn::cli
