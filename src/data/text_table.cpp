#include "bertcc/text_table.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/json_depth.h"

namespace bertcc {

char delimiter_for(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0 ? ',' : '\t';
}

std::vector<TableRow> read_table(const std::string& path, char delim) {
  const std::string s = read_file(path);
  size_t i = text_bom_length(s, path);
  std::vector<TableRow> rows;
  int64_t line = 1;
  while (i < s.size()) {
    TableRow r;
    r.line = line;
    std::string field;
    bool row_done = false;
    while (!row_done) {
      if (delim == ',' && i < s.size() && s[i] == '"' && field.empty()) {  // quoted field
        const int64_t qline = line;
        ++i;
        for (;;) {
          BERTCC_CHECK(i < s.size(), path, ":", qline, ": unterminated quoted field");
          if (s[i] == '"') {
            if (i + 1 < s.size() && s[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (s[i] == '\n') ++line;
          field += s[i++];
        }
        BERTCC_CHECK(i >= s.size() || s[i] == delim || s[i] == '\n' || s[i] == '\r', path, ":", line,
                     ": unexpected character after a closing quote");
      }
      while (i < s.size() && s[i] != delim && s[i] != '\n') field += s[i++];
      if (i >= s.size() || s[i] == '\n') {
        if (!field.empty() && field.back() == '\r') field.pop_back();
        row_done = true;
        if (i < s.size()) ++line;
      }
      ++i;
      r.cols.push_back(std::move(field));
      field.clear();
    }
    if (r.cols.size() == 1 && r.cols[0].empty()) continue;  // blank line
    // Every row has the first row's fields, as pandas reads a table: an unquoted delimiter in a
    // text field would shift the columns after it (its tail read as the label).
    BERTCC_CHECK(rows.empty() || r.cols.size() == rows[0].cols.size(), path, ":", r.line, ": expected ",
                 rows.empty() ? 0 : rows[0].cols.size(), " fields (as line ", rows.empty() ? 0 : rows[0].line,
                 "), saw ", r.cols.size(),
                 delim == ',' ? "; a field that holds a comma must be quoted (\"he said no, way\")" : "");
    rows.push_back(std::move(r));
  }
  return rows;
}

static bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

bool is_json_lines(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".ndjson"); }

std::vector<TableRow> read_json_lines(const std::string& path, std::vector<std::string>& keys) {
  const std::string s = read_file(path);
  std::vector<TableRow> rows;
  keys.clear();
  size_t i = s.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (int64_t line = 1; i < s.size(); ++line) {
    size_t end = s.find('\n', i);
    if (end == std::string::npos) end = s.size();
    const std::string text = s.substr(i, end - i);
    i = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const size_t deep = json_too_deep_at(text);
    BERTCC_CHECK(deep == std::string::npos, path, ":", line, ": JSON nested deeper than ", kMaxJsonDepth, " levels");
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", line, ": not a JSON object on one line (JSON lines): ", e.what());
    }
    BERTCC_CHECK(j.is_object(), path, ":", line, ": expected a JSON object, found ", j.type_name());
    if (keys.empty()) {
      for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
      BERTCC_CHECK(!keys.empty(), path, ":", line, ": an empty object (the first object names the columns)");
    }
    TableRow r;
    r.line = line;
    for (const std::string& k : keys) {
      const auto it = j.find(k);
      if (it == j.end() || it->is_null())
        r.cols.emplace_back();
      else
        r.cols.push_back(it->is_string() ? it->get<std::string>() : it->dump());
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

namespace {

bool is_column_number(const std::string& s) {
  return !s.empty() && s.size() < 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool looks_like_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!letter(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9') || c == ' ' || c == '-' || c == '.'; });
}

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + v[i];
  return r;
}

}  // namespace

std::string describe_table_columns(const std::vector<TableRow>& rows, const TableColumns& c) {
  if (!c.names.empty()) return "the file's columns: " + join(c.names);
  if (rows.empty()) return "the file has no rows";
  return "the file's first row has " + std::to_string(rows[0].cols.size()) + " columns";
}

bool hf_named_columns(const std::vector<TableRow>& rows, const std::vector<std::string>& keys, std::string& label,
                      std::vector<std::string>& texts) {
  std::vector<std::string> names = keys;
  if (names.empty() && !rows.empty() && std::all_of(rows[0].cols.begin(), rows[0].cols.end(), looks_like_name))
    names = rows[0].cols;
  auto has = [&names](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  std::vector<std::string> t;
  if (has("sentence1") && has("sentence2"))
    t = {"sentence1", "sentence2"};
  else if (has("text"))
    t = {"text"};
  else if (has("sentence"))
    t = {"sentence"};
  else
    return false;
  texts = t;
  label = has("label") ? "label" : "";
  return true;
}

TableColumns resolve_table_columns(const std::vector<TableRow>& rows, const std::vector<std::string>& keys,
                                   const std::string& path, const std::string& label,
                                   const std::vector<std::string>& texts, bool skip_header,
                                   const std::vector<std::string>& known_labels) {
  TableColumns c;
  std::vector<std::string> wanted = texts;
  if (!label.empty()) wanted.insert(wanted.begin(), label);
  const bool any_name =
      std::any_of(wanted.begin(), wanted.end(), [](const std::string& w) { return !is_column_number(w); });
  if (!keys.empty()) {
    c.names = keys;
  } else if (any_name || skip_header) {
    BERTCC_CHECK(!rows.empty(), path, ": no rows");
    c.header = true;
    c.names = rows[0].cols;
  }
  auto index_of = [&](const std::string& w, const char* flag) {
    if (is_column_number(w)) return std::stoi(w);
    const auto it = std::find(c.names.begin(), c.names.end(), w);
    if (it != c.names.end()) return static_cast<int>(it - c.names.begin());
    if (!keys.empty())
      fail(path, ": ", flag, " '", w, "' is not a key of its JSON objects; the file's keys: ", join(keys));
    fail(path, ":", rows[0].line, ": ", flag, " '", w, "' is not a column of the first row, which is read as the ",
         "header because a column is given by name; the file's first row: ", join(rows[0].cols),
         " (name a column of the header, or give 0-based numbers)");
    return -1;
  };
  if (!label.empty()) c.label = index_of(label, "--label-column");
  for (const std::string& t : texts) c.text.push_back(index_of(t, "--text-columns"));
  if (c.header || !keys.empty() || rows.empty() || c.label < 0) return c;
  // Numbers only and no --skip-header: is the first row a header all the same?
  const TableRow& first = rows[0];
  if (static_cast<int>(first.cols.size()) <= c.label || std::count(c.text.begin(), c.text.end(), c.label)) return c;
  const std::string& cell = first.cols[static_cast<size_t>(c.label)];
  std::set<std::string> known(known_labels.begin(), known_labels.end());
  if (known_labels.empty())
    for (size_t i = 1; i < rows.size(); ++i)
      if (static_cast<int>(rows[i].cols.size()) > c.label) known.insert(rows[i].cols[static_cast<size_t>(c.label)]);
  if (known.count(cell) || !std::all_of(first.cols.begin(), first.cols.end(), looks_like_name)) return c;
  c.header = true;
  c.names = first.cols;
  return c;
}

}  // namespace bertcc
