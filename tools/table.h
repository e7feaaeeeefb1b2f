// table.h: plain-text tables with aligned columns, and number formats the tool prints.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace tileattn::cli {

class Table {
 public:
  // A header per column; columns whose header starts with '<' are left-aligned (the '<' is
  // dropped), the others right-aligned, as numbers read best.
  explicit Table(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);
  void print(std::FILE* out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> left_;
  std::vector<std::vector<std::string>> rows_;
};

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format_bytes(int64_t bytes);  // "1.00 GiB", "160.0 KiB", "512 B"
std::string format_ms(double ms);         // "1234.5 ms", "0.123 ms"
std::string format_error(double err);     // "3.1e-07", "0" when exact

}  // namespace tileattn::cli
