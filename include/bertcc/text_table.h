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

// JSON lines (*.jsonl, *.ndjson): one object per line; the columns are the first object's keys, in
// its order (`keys`), and each row holds those keys' values (strings as they are, numbers and
// booleans as JSON writes them, a missing key or null as ""). Errors name the file and line.
std::vector<TableRow> read_json_lines(const std::string& path, std::vector<std::string>& keys);
bool is_json_lines(const std::string& path);

// The label and text columns of a table, given as 0-based numbers or as column names.
struct TableColumns {
  int label = -1;
  std::vector<int> text;
  bool header = false;             // the first row is a header (not an example)
  std::vector<std::string> names;  // the columns' names (the header's cells, or JSON lines' keys)
};
// The rule, for a table without `keys`: a column given by name needs a header, so the first row
// must be one and hold that name (else an error listing the first row's cells). With numbers only,
// the first row is a header when `skip_header` is set, or when it looks like one: it has the label
// column, its label cell is not a known label (`known_labels`; empty: the label cells of the other
// rows) and each of its cells is a short name (1 to 64 bytes of letters, digits, ' ', '_', '-', '.',
// beginning with a letter or '_'). With `keys` (JSON lines), names are the keys and numbers index
// them. `label` "" : no label column wanted (prediction files).
TableColumns resolve_table_columns(const std::vector<TableRow>& rows, const std::vector<std::string>& keys,
                                   const std::string& path, const std::string& label,
                                   const std::vector<std::string>& texts, bool skip_header,
                                   const std::vector<std::string>& known_labels);
// The columns a Hugging Face user's file names, for a table whose columns are not given on the
// command line (run_glue.py's names for a file of one's own): texts "sentence1" and "sentence2", else
// "text", else "sentence"; the label "label" (`label` is set to "" when there is none). The names are
// JSON lines' keys, or the first row's cells when each looks like a name (as resolve_table_columns
// tells a header). False, and nothing set, when no text column has one of those names.
bool hf_named_columns(const std::vector<TableRow>& rows, const std::vector<std::string>& keys, std::string& label,
                      std::vector<std::string>& texts);
// For messages: "the file's columns: sentence,label" (named), else "the file's first row has 3
// columns".
std::string describe_table_columns(const std::vector<TableRow>& rows, const TableColumns& c);

}  // namespace bertcc
