// Delimited text tables for classification data: CSV with RFC 4180 quoting (quoted fields may
// hold the delimiter, doubled quotes and newlines) or TSV with quoting off (as GLUE ships it).
// A UTF-8 BOM and CRLF line ends are tolerated. Errors name the file and line.
#pragma once
#include <string>
#include <vector>

namespace bertcc {

struct TableRow {
  std::vector<std::string> cols;
  int64_t line = 0;  // 1-based line where the row starts
};

// delimiter ',' parses quotes; '\t' (or any other) splits literally.
std::vector<TableRow> read_table(const std::string& path, char delimiter);
// ',' for *.csv, '\t' otherwise.
char delimiter_for(const std::string& path);

}  // namespace bertcc
