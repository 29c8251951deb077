#include "bertcc/text_table.h"

#include "bertcc/error.h"
#include "bertcc/fileio.h"

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
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace bertcc
