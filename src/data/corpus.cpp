#include "bertcc/corpus.h"

#include "bertcc/utf8.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace bertcc {
namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Closing characters that may follow sentence-final punctuation: " ' ) ] } and UTF-8 ” ’ » .
size_t strip_closers(std::string_view t) {
  size_t e = t.size();
  for (;;) {
    if (e >= 1 && (t[e - 1] == '"' || t[e - 1] == '\'' || t[e - 1] == ')' || t[e - 1] == ']' || t[e - 1] == '}')) {
      --e;
    } else if (e >= 3 && (t.substr(e - 3, 3) == "\xE2\x80\x9D" || t.substr(e - 3, 3) == "\xE2\x80\x99")) {
      e -= 3;
    } else if (e >= 2 && t.substr(e - 2, 2) == "\xC2\xBB") {
      e -= 2;
    } else {
      return e;
    }
  }
}

// First letter-like character of the next token after opening quotes/brackets.
bool starts_sentence(std::string_view t) {
  size_t i = 0;
  for (;;) {
    if (i < t.size() && (t[i] == '"' || t[i] == '\'' || t[i] == '(' || t[i] == '[' || t[i] == '`')) {
      ++i;
    } else if (i + 3 <= t.size() && (t.substr(i, 3) == "\xE2\x80\x9C" || t.substr(i, 3) == "\xE2\x80\x98")) {
      i += 3;
    } else if (i + 2 <= t.size() && t.substr(i, 2) == "\xC2\xAB") {
      i += 2;
    } else {
      break;
    }
  }
  if (i >= t.size()) return true;
  const unsigned char c = static_cast<unsigned char>(t[i]);
  if (c >= 0x80) return true;  // non-ASCII letter: assume a sentence start (cannot tell case cheaply)
  return std::isupper(c) || std::isdigit(c) || i > 0;
}

const std::array<const char*, 40> kTitles = {
    "mr",  "mrs", "ms",  "dr",  "prof", "st",   "jr",     "sr",   "rev",  "gen",  "col",  "lt",  "sgt", "capt",
    "hon", "gov", "sen", "rep", "mt",   "ft",   "messrs", "mme",  "mlle", "vs",   "no",   "nos", "vol", "fig",
    "pp",  "cf",  "gov", "adm", "maj",  "cmdr", "supt",   "insp", "esq",  "bros", "atty", "dept"};

bool is_title(std::string_view w) {
  std::string l;
  for (char c : w) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  for (const char* t : kTitles)
    if (l == t) return true;
  return false;
}

bool boundary_after(std::string_view tok, std::string_view next) {
  const size_t e = strip_closers(tok);
  if (e == 0) return false;
  const std::string_view core = tok.substr(0, e);
  const bool ellipsis = core.size() >= 3 && core.substr(core.size() - 3) == "\xE2\x80\xA6";
  const char last = core.back();
  if (!ellipsis && last != '.' && last != '?' && last != '!') return false;
  if (next.empty()) return true;
  if (!starts_sentence(next)) return false;
  if (last != '.' || ellipsis) return true;
  // A period: rule out abbreviations, initials and acronyms.
  std::string_view word = core.substr(0, core.size() - 1);
  while (!word.empty() && (word.front() == '"' || word.front() == '\'' || word.front() == '(' || word.front() == '['))
    word.remove_prefix(1);
  if (word.size() >= 2 && word.substr(word.size() - 2) == "..") return true;  // "..." ellipsis
  if (word.empty()) return true;
  if (is_title(word)) return false;
  if (word.size() == 1 && std::isalpha(static_cast<unsigned char>(word[0]))) return false;  // initial
  if (word.find('.') != std::string_view::npos) {                                           // U.S. e.g. i.e. Ph.D.
    bool acronym = true;
    for (char c : word) acronym = acronym && (std::isalpha(static_cast<unsigned char>(c)) || c == '.');
    if (acronym) return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> split_sentences(std::string_view p) {
  std::vector<std::string_view> toks;
  size_t i = 0;
  while (i < p.size()) {
    while (i < p.size() && is_space(static_cast<unsigned char>(p[i]))) ++i;
    const size_t s = i;
    while (i < p.size() && !is_space(static_cast<unsigned char>(p[i]))) ++i;
    if (i > s) toks.push_back(p.substr(s, i - s));
  }
  std::vector<std::string> out;
  std::string cur;
  for (size_t k = 0; k < toks.size(); ++k) {
    if (!cur.empty()) cur.push_back(' ');
    cur.append(toks[k]);
    if (boundary_after(toks[k], k + 1 < toks.size() ? toks[k + 1] : std::string_view())) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::vector<std::string> segment_document(std::string_view text) {
  std::vector<std::string> out;
  std::string para;
  size_t pos = 0;
  auto flush = [&]() {
    if (para.empty()) return;
    for (auto& s : split_sentences(para)) out.push_back(std::move(s));
    para.clear();
  };
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    bool blank = true;
    for (char c : line) blank = blank && is_space(static_cast<unsigned char>(c));
    if (blank) {
      flush();
    } else {
      if (!para.empty()) para.push_back(' ');
      para.append(line);
    }
    pos = nl + 1;
  }
  flush();
  return out;
}

int64_t sanitize_utf8(std::string& s) {
  int64_t bad = 0;
  std::string out;
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    bool invalid;
    decode_utf8(b, s.size(), i, invalid);
    if (invalid) {
      if (!bad) out.assign(s, 0, start);
      out.append("\xEF\xBF\xBD");
      ++bad;
    } else if (bad) {
      out.append(s, start, i - start);
    }
  }
  if (bad) s.swap(out);
  return bad;
}

}  // namespace bertcc
