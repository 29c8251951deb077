// The help every command shares (docs/flags.md): one spelling per meaning shown first, the old
// spellings after it, every default, and the nearest flag or command for a misspelt one.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "tools/cli_common.h"

namespace bertcc::tools {

namespace {

std::string lower_dashed(std::string s) {
  for (char& c : s) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool mentions_default(const std::string& text) {
  std::string t = text;
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t.find("default") != std::string::npos;
}

// Flags and options with a value the user may leave out, as opposed to inputs with no default.
bool takes_value(const CLI::Option* opt) { return opt->get_type_size() != 0 && opt->get_expected_max() != 0; }

class Help : public CLI::Formatter {
 public:
  Help() { column_width(34); }
  // The dash spellings only: every flag also takes its underscore spelling (said in the footer).
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional) return opt->get_name(true, false);
    std::vector<std::string> shown;
    for (const auto& s : opt->get_snames()) shown.push_back("-" + s);
    for (const auto& l : opt->get_lnames()) {
      const std::string name = "--" + l;
      if (l.find('_') != std::string::npos &&
          std::find(shown.begin(), shown.end(), "--" + lower_dashed(l)) != shown.end())
        continue;
      shown.push_back(name);
    }
    std::string out;
    for (const auto& s : shown) out += (out.empty() ? "" : ", ") + s;
    return out;
  }
  // The value's type and REQUIRED; the default goes to the description.
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string out;
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    if (opt->get_type_size() != 0 && !opt->get_type_name().empty()) out += " " + get_label(opt->get_type_name());
    if (opt->get_type_size() != 0 && opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
    if (opt->get_required()) out += " " + get_label("REQUIRED");
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string d = opt->get_description();
    const std::string& def = opt->get_default_str();
    if (takes_value(opt) && !opt->get_required() && !def.empty() && def != "[]" && !mentions_default(d))
      d += " (default " + def + ")";
    return d;
  }
};

// Optimal string alignment distance (a transposition counts one edit).
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

// The candidates nearest to `word` (compared without leading dashes, underscores as dashes, any
// case): the closest within a third of its length (at least 2 edits), else those that contain it.
std::vector<std::string> nearest(const std::string& word, const std::vector<std::string>& candidates) {
  auto bare = [](const std::string& s) {
    return lower_dashed(s.substr(s.find_first_not_of('-') == std::string::npos ? s.size() : s.find_first_not_of('-')));
  };
  const std::string w = bare(word);
  if (w.empty()) return {};
  size_t best = std::string::npos;
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    const size_t dist = edit_distance(w, bare(c));
    if (dist < best) {
      best = dist;
      out = {c};
    } else if (dist == best && std::find(out.begin(), out.end(), c) == out.end()) {
      out.push_back(c);
    }
  }
  if (best <= std::max<size_t>(2, w.size() / 3) && out.size() <= 3) return out;
  out.clear();
  if (w.size() >= 3)  // a part of the name (--epochs), or the name with more (--vocab-file)
    for (const auto& c : candidates) {
      const std::string b = bare(c);
      if ((b.find(w) != std::string::npos || (b.size() >= 4 && w.find(b) != std::string::npos)) &&
          std::find(out.begin(), out.end(), c) == out.end())
        out.push_back(c);
    }
  if (out.size() > 4) out.clear();
  return out;
}

std::string join_or(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + v[i];
  return out;
}

std::string command_path(const CLI::App* a) {
  std::string path;
  for (; a; a = a->get_parent()) path = (a->get_parent() ? a->get_name() : "bertcc") + (path.empty() ? "" : " " + path);
  return path;
}

}  // namespace

std::shared_ptr<CLI::FormatterBase> help_formatter() { return std::make_shared<Help>(); }

void show_defaults(CLI::App& app) {
  for (CLI::Option* opt : app.get_options())
    if (takes_value(opt) && opt->get_default_str().empty()) opt->capture_default_str();
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) show_defaults(*sub);
}

std::string unknown_argument_message(const CLI::App& root) {
  // The deepest command parsed holds the arguments nothing took.
  std::vector<const CLI::App*> chain{&root};
  for (;;) {
    const auto subs = chain.back()->get_subcommands();
    if (subs.empty()) break;
    chain.push_back(subs.back());
  }
  std::ostringstream msg;
  for (const CLI::App* a : chain) {
    const std::vector<std::string> left = a->remaining(false);
    if (left.empty()) continue;
    std::vector<std::string> flags, commands;
    for (const CLI::Option* opt : a->get_options()) {
      for (const auto& l : opt->get_lnames())
        if (l.find('_') == std::string::npos) flags.push_back("--" + l);
    }
    for (const CLI::App* s : a->get_subcommands([](const CLI::App*) { return true; }))
      commands.push_back(s->get_name());
    const std::string path = command_path(a);
    bool any = false;
    for (const std::string& arg : left) {
      if (arg.size() > 1 && arg[0] == '-') {
        const std::string name = arg.substr(0, arg.find('='));
        const auto near = nearest(name, flags);
        msg << "bertcc: error: " << path << ": unknown flag " << name;
        if (!near.empty()) msg << "; did you mean " << join_or(near) << "?";
        msg << "\n";
        any = true;
      } else if (!commands.empty() && &arg == &left.front()) {
        const auto near = nearest(arg, commands);
        msg << "bertcc: error: " << path << ": unknown command '" << arg << "'";
        if (!near.empty()) msg << "; did you mean " << join_or(near) << "?";
        msg << "\n";
        any = true;
      }
    }
    if (any)
      msg << "Run `" << path << " --help` for its " << (commands.empty() ? "flags and their defaults" : "commands")
          << ".\n";
  }
  return msg.str();
}

}  // namespace bertcc::tools
