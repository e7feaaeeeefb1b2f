// table.cc: column alignment and number formats.
#include "table.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>

namespace tileattn::cli {

Table::Table(std::vector<std::string> headers) {
  for (auto& h : headers) {
    const bool left = !h.empty() && h[0] == '<';
    left_.push_back(left);
    headers_.push_back(left ? h.substr(1) : h);
  }
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::FILE* out) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      text += c ? "  " : "";
      text += left_[c] ? cells[c] + pad : pad + cells[c];
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    std::fprintf(out, "%s\n", text.c_str());
  };
  line(headers_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& row : rows_) line(row);
}

std::string format(const char* fmt, ...) {
  char text[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  return text;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return format("%lld B", static_cast<long long>(bytes));
  if (b < 1024.0 * 1024) return format("%.1f KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return format("%.1f MiB", b / (1024.0 * 1024));
  return format("%.2f GiB", b / (1024.0 * 1024 * 1024));
}

std::string format_ms(double ms) {
  if (std::isnan(ms)) return "-";
  if (ms >= 100) return format("%.1f ms", ms);
  if (ms >= 1) return format("%.2f ms", ms);
  return format("%.3f ms", ms);
}

std::string format_error(double err) {
  if (std::isnan(err)) return "nan";
  if (err == 0) return "0";
  return format("%.1e", err);
}

}  // namespace tileattn::cli
