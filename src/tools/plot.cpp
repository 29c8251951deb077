// bertcc plot: loss and learning-rate curves from a DLLogger JSON-lines file, as SVG.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "tools/cli_common.h"

namespace bertcc::tools {
namespace {

using Series = std::vector<std::pair<double, double>>;

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, std::fabs(v) >= 1000 || (v != 0 && std::fabs(v) < 0.01) ? "%.2g" : "%.3g", v);
  return b;
}

// One panel: axes, ticks, and each series as a polyline.
void panel(std::ostringstream& svg, double x0, double y0, double w, double h, const std::string& title,
           const std::vector<std::tuple<std::string, std::string, const Series*>>& lines, double xmax) {
  double lo = 1e300, hi = -1e300;
  for (const auto& [name, color, s] : lines)
    for (const auto& [x, y] : *s) {
      lo = std::min(lo, y);
      hi = std::max(hi, y);
    }
  if (lo > hi) lo = 0, hi = 1;
  if (hi - lo < 1e-12) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  auto X = [&](double x) { return x0 + w * x / std::max(xmax, 1.0); };
  auto Y = [&](double y) { return y0 + h - h * (y - lo) / (hi - lo); };
  svg << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
      << "' fill='none' stroke='#444'/>\n<text x='" << x0 << "' y='" << y0 - 8 << "' font-size='15'>" << title
      << "</text>\n";
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (hi - lo) * k / 4, yy = Y(v);
    svg << "<line x1='" << x0 << "' x2='" << x0 + w << "' y1='" << yy << "' y2='" << yy << "' stroke='#ddd'/><text x='"
        << x0 - 6 << "' y='" << yy + 4 << "' font-size='11' text-anchor='end'>" << fmt(v) << "</text>\n";
    const double xv = xmax * k / 4;
    svg << "<text x='" << X(xv) << "' y='" << y0 + h + 16 << "' font-size='11' text-anchor='middle'>"
        << static_cast<long long>(xv) << "</text>\n";
  }
  int li = 0;
  for (const auto& [name, color, s] : lines) {
    if (s->empty()) continue;
    svg << "<polyline fill='none' stroke='" << color << "' stroke-width='1.6' points='";
    for (const auto& [x, y] : *s) svg << X(x) << "," << Y(y) << " ";
    svg << "'/>\n<text x='" << x0 + w - 8 << "' y='" << y0 + 18 + 16 * li++ << "' font-size='12' fill='" << color
        << "' text-anchor='end'>" << name << "</text>\n";
  }
}

}  // namespace

void add_plot(CLI::App& app) {
  auto log = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto* sub = app.add_subcommand("plot", "Draw loss and learning-rate curves from a DLLogger log (SVG)");
  sub->add_option("log", *log, "dllogger.json written by bertcc pretrain")->required();
  sub->add_option(flag("--output", {"--out"}), *out, "output .svg")->required();
  sub->callback([log, out]() {
    check_output_not_input(*out, "--output", *log, "log");
    std::ifstream in(*log);
    BERTCC_CHECK(in, *log, ": cannot open");
    std::map<std::string, Series> s;
    std::string line;
    int64_t n = 0;
    double xmax = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.rfind("DLLL ", 0) != 0) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line.substr(5));
      } catch (const nlohmann::json::exception& e) {
        fail(*log, ":", n, ": invalid JSON: ", e.what());
      }
      if (j.value("type", "") != "LOG" || !j["step"].is_array() || j["step"].size() < 2) continue;
      const double step = j["step"][1].get<double>();
      xmax = std::max(xmax, step);
      for (auto it = j["data"].begin(); it != j["data"].end(); ++it)
        if (it->is_number()) s[it.key()].emplace_back(step, it->get<double>());
    }
    BERTCC_CHECK(!s["loss"].empty(), *log, ": no training log lines (type LOG with data.loss)");
    std::ostringstream svg;
    svg << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='640' font-family='sans-serif'>\n"
        << "<rect width='100%' height='100%' fill='white'/>\n";
    panel(svg, 70, 40, 800, 340, "loss",
          {{"train loss", "#1f77b4", &s["loss"]},
           {"train MLM", "#2ca02c", &s["mlm_loss"]},
           {"train NSP", "#9467bd", &s["nsp_loss"]},
           {"held-out loss", "#d62728", &s["eval.loss"]}},
          xmax);
    panel(svg, 70, 440, 800, 160, "learning rate", {{"learning rate", "#ff7f0e", &s["learning_rate"]}}, xmax);
    svg << "<text x='470' y='632' font-size='12' text-anchor='middle'>step</text>\n</svg>\n";
    write_file_atomic(*out, svg.str());
    std::cout << "wrote " << *out << " (" << s["loss"].size() << " points, " << s["eval.loss"].size()
              << " evaluations)\n";
  });
}

}  // namespace bertcc::tools
