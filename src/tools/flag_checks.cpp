// The numeric-flag layer of every command (cli_common.h).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

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

CLI::Validator in_range(double lo, double hi, const std::string& what) {
  return CLI::Validator(
      [lo, hi, what](std::string& s) -> std::string {
        double v = 0;
        if (!parse_number(s, v)) return "'" + s + "' is not a number";
        if (!std::isfinite(v)) return "'" + s + "' is not a finite number";
        if (!(v >= lo && v <= hi))
          return s + " is outside [" + shown(lo) + ", " + shown(hi) + "]" + (what.empty() ? "" : " (" + what + ")");
        return "";
      },
      "");
}

void check_numeric_flags(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0) continue;  // a flag without a value
    const std::string type = opt->get_type_name();
    if (starts_with(type, "FLOAT"))
      opt->check(finite_number());
    else if (starts_with(type, "INT") || starts_with(type, "UINT"))
      opt->check(whole_number());
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) check_numeric_flags(*sub);
}

}  // namespace bertcc::tools
