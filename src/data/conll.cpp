#include <fstream>
#include <sstream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/ner.h"

namespace bertcc {

std::vector<NerSentence> read_conll(const std::string& path) {
  std::ifstream in;
  open_text_input(in, path);
  std::vector<NerSentence> out;
  NerSentence cur;
  std::string line;
  int64_t n = 0;
  size_t ncols = 0;
  auto flush = [&]() {
    if (!cur.words.empty()) out.push_back(std::move(cur));
    cur = NerSentence{};
  };
  while (std::getline(in, line)) {
    ++n;
    if (n == 1) strip_text_bom(line, path);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream is(line);
    std::vector<std::string> cols;
    for (std::string c; is >> c;) cols.push_back(c);
    if (cols.empty()) {
      flush();
      continue;
    }
    if (cols[0] == "-DOCSTART-") {
      flush();
      continue;
    }
    if (ncols == 0) ncols = cols.size();
    BERTCC_CHECK(cols.size() == ncols, path, ":", n, ": expected ", ncols, " columns like the first token line, found ",
                 cols.size());
    if (cur.words.empty()) cur.line = n;
    cur.words.push_back(cols[0]);
    if (ncols > 1) {
      const std::string& t = cols.back();
      BERTCC_CHECK(
          t == "O" || (t.size() > 2 && t[1] == '-' && (t[0] == 'B' || t[0] == 'I' || t[0] == 'E' || t[0] == 'S')), path,
          ":", n, ": tag '", t, "' is not O or B-/I-/E-/S-TYPE");
      cur.tags.push_back(t);
    }
  }
  flush();
  BERTCC_CHECK(!out.empty(), path, ": no sentences");
  return out;
}

}  // namespace bertcc
