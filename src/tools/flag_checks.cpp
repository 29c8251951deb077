// The numeric-flag layer of every command (cli_common.h).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "tools/cli_common.h"

namespace bertcc::tools {

namespace {
std::string shown(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// The number the text spells; false when it is not one (the option's own conversion says so).
bool parse_number(const std::string& s, double& v) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
}  // namespace

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (parse_number(s, v) && !std::isfinite(v)) return "'" + s + "' is not a finite number";
        return "";
      },
      "");
}

CLI::Validator in_range(double lo, double hi, const std::string& what, bool lo_open) {
  return CLI::Validator(
      [lo, hi, what, lo_open](std::string& s) -> std::string {
        double v = 0;
        if (!parse_number(s, v)) return "'" + s + "' is not a number";
        if (!std::isfinite(v)) return "'" + s + "' is not a finite number";
        if (!((lo_open ? v > lo : v >= lo) && v <= hi))
          return s + " is outside " + (lo_open ? "(" : "[") + shown(lo) + ", " + shown(hi) + "]" +
                 (what.empty() ? "" : " (" + what + ")");
        return "";
      },
      "", kRangeValidator);
}

namespace {
bool has_range(CLI::Option* opt) {
  try {
    opt->get_validator(kRangeValidator);
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

void check_numeric_flags(CLI::App& app, const std::string& path, std::vector<std::string>& unranged) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0) continue;  // a flag without a value
    const std::string type = opt->get_type_name();
    const bool is_float = starts_with(type, "FLOAT");
    if (!is_float && !starts_with(type, "INT") && !starts_with(type, "UINT")) continue;
    opt->check(is_float ? finite_number() : whole_number());
    if (!has_range(opt)) unranged.push_back(path + " " + opt->get_name());
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    check_numeric_flags(*sub, path + " " + sub->get_name(), unranged);
}
}  // namespace

void check_numeric_flags(CLI::App& app) {
  std::vector<std::string> unranged;
  check_numeric_flags(app, app.get_name(), unranged);
  if (unranged.empty()) return;
  std::string list;
  for (const auto& u : unranged) list += "\n  " + u;
  // A program error, not a user's: every test of every command fails on it until the flag has one.
  throw std::logic_error("numeric flags without a range (give each an in_range tied to what it sizes):" + list);
}

}  // namespace bertcc::tools
