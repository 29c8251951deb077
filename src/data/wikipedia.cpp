#include "bertcc/wikipedia.h"

#include <bzlib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/utf8.h"

namespace bertcc {
namespace {

// A byte source over a plain or bzip2 file (multi-stream: concatenated bzip2 streams).
class Source {
 public:
  explicit Source(const std::string& path) : path_(path) {
    f_ = std::fopen(path.c_str(), "rb");
    BERTCC_CHECK(f_, path, ": cannot open");
    bz_ = path.size() > 4 && path.compare(path.size() - 4, 4, ".bz2") == 0;
    if (bz_) open_stream(nullptr, 0);
  }
  uint64_t position() const { return f_ ? static_cast<uint64_t>(std::ftell(f_)) : 0; }
  uint64_t size() const {
    const long here = std::ftell(f_);
    std::fseek(f_, 0, SEEK_END);
    const long end = std::ftell(f_);
    std::fseek(f_, here, SEEK_SET);
    return static_cast<uint64_t>(end);
  }
  ~Source() {
    if (b_) BZ2_bzReadClose(&err_, b_);
    if (f_) std::fclose(f_);
  }
  // Appends up to n bytes; returns 0 at end of input.
  size_t read(std::string& out, size_t n) {
    const size_t old = out.size();
    out.resize(old + n);
    size_t got;
    if (!bz_) {
      got = std::fread(out.data() + old, 1, n, f_);
      BERTCC_CHECK(!std::ferror(f_), path_, ": read error");
    } else {
      got = 0;
      while (got == 0 && b_) {
        const int r = BZ2_bzRead(&err_, b_, out.data() + old, static_cast<int>(n));
        if (err_ == BZ_OK) {
          got = static_cast<size_t>(r);
        } else if (err_ == BZ_STREAM_END) {
          got = static_cast<size_t>(r);
          void* unused;
          int nunused;
          BZ2_bzReadGetUnused(&err_, b_, &unused, &nunused);
          std::vector<char> keep(static_cast<char*>(unused), static_cast<char*>(unused) + nunused);
          BZ2_bzReadClose(&err_, b_);
          b_ = nullptr;
          // Another stream follows if there are unused bytes or more file data.
          if (!keep.empty() || !std::feof(f_)) {
            int c = keep.empty() ? std::fgetc(f_) : 0;
            if (keep.empty() && c != EOF) {
              keep.push_back(static_cast<char>(c));
            }
            if (!keep.empty()) open_stream(keep.data(), static_cast<int>(keep.size()));
          }
        } else {
          fail(path_, ": ",
               err_ == BZ_DATA_ERROR_MAGIC ? "not a bzip2 file"
               : err_ == BZ_UNEXPECTED_EOF ? "truncated bzip2 data (unexpected end of file)"
               : err_ == BZ_DATA_ERROR     ? "corrupt bzip2 data"
                                           : "bzip2 read error",
               " after ", total_, " decompressed bytes");
        }
      }
    }
    out.resize(old + got);
    if (total_ == 0 && got > 0) {  // the first bytes: a UTF-8 BOM skipped, UTF-16/32 refused
      const size_t bom = text_bom_length(std::string_view(out).substr(old), path_);
      out.erase(old, bom);
      total_ += bom;
      got -= bom;
    }
    total_ += got;
    return got;
  }

 private:
  void open_stream(void* unused, int n) {
    b_ = BZ2_bzReadOpen(&err_, f_, 0, 0, unused, n);
    BERTCC_CHECK(err_ == BZ_OK && b_, path_, ": cannot start bzip2 decompression");
  }
  std::string path_;
  FILE* f_ = nullptr;
  BZFILE* b_ = nullptr;
  int err_ = 0;
  bool bz_ = false;
  uint64_t total_ = 0;
};

std::string between(std::string_view s, std::string_view open_prefix, std::string_view close, bool* found) {
  *found = false;
  const size_t a = s.find(open_prefix);
  if (a == std::string_view::npos) return {};
  const size_t gt = s.find('>', a);
  if (gt == std::string_view::npos) return {};
  if (s[gt - 1] == '/') {  // <text ... />
    *found = true;
    return {};
  }
  const size_t b = s.find(close, gt + 1);
  if (b == std::string_view::npos) return {};
  *found = true;
  return std::string(s.substr(gt + 1, b - gt - 1));
}

// Removes balanced regions open..close (nested), e.g. {{ }} and {| |}.
std::string remove_nested(std::string_view s, std::string_view open, std::string_view close) {
  std::string out;
  out.reserve(s.size());
  int depth = 0;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, open.size(), open) == 0) {
      ++depth;
      i += open.size();
    } else if (depth > 0 && s.compare(i, close.size(), close) == 0) {
      --depth;
      i += close.size();
    } else {
      if (depth == 0) out.push_back(s[i]);
      ++i;
    }
  }
  return out;
}

bool ieq_prefix(std::string_view s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(p[i]))) return false;
  return true;
}

// Removes tags whose content is dropped (<ref>...</ref>, <math>...</math>, ...), self-closing
// forms, and strips all other tags keeping their content.
std::string strip_tags(std::string_view s) {
  static const char* drop[] = {"ref",    "math",      "gallery",  "timeline",     "score", "syntaxhighlight",
                               "source", "imagemap",  "mapframe", "templatedata", "chem",  "hiero",
                               "graph",  "references"};
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '<') {
      out.push_back(s[i++]);
      continue;
    }
    const size_t gt = s.find('>', i);
    if (gt == std::string_view::npos) {
      out.append(s.substr(i));
      break;
    }
    std::string_view tag = s.substr(i + 1, gt - i - 1);
    const bool closing = !tag.empty() && tag[0] == '/';
    const bool self_closing = !tag.empty() && tag.back() == '/';
    std::string_view name = closing ? tag.substr(1) : tag;
    size_t e = 0;
    while (e < name.size() && (std::isalnum(static_cast<unsigned char>(name[e])))) ++e;
    name = name.substr(0, e);
    if (name.empty()) {  // not a tag ("a < b")
      out.push_back(s[i++]);
      continue;
    }
    bool dropped = false;
    if (!closing && !self_closing)
      for (const char* d : drop)
        if (name.size() == std::strlen(d) && ieq_prefix(name, d)) {
          const std::string close = std::string("</") + d;
          size_t c = i;
          for (;;) {  // case-insensitive search for the closing tag
            c = s.find("</", c + 1);
            if (c == std::string_view::npos || ieq_prefix(s.substr(c), close)) break;
          }
          if (c == std::string_view::npos) {
            i = gt + 1;
          } else {
            const size_t cg = s.find('>', c);
            i = cg == std::string_view::npos ? s.size() : cg + 1;
          }
          dropped = true;
          break;
        }
    if (!dropped) i = gt + 1;
  }
  return out;
}

// [[target|label]] -> label, [[target]] -> target; files, images, categories and interlanguage
// links (with nested links in captions) removed.
std::string convert_links(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "[[") != 0) {
      out.push_back(s[i++]);
      continue;
    }
    int depth = 0;
    size_t j = i;
    for (; j < s.size(); ++j) {
      if (s.compare(j, 2, "[[") == 0) {
        ++depth;
        ++j;
      } else if (s.compare(j, 2, "]]") == 0) {
        --depth;
        ++j;
        if (depth == 0) break;
      }
    }
    if (j >= s.size()) {  // unbalanced: drop the brackets
      i += 2;
      continue;
    }
    std::string_view inner = s.substr(i + 2, j - 1 - (i + 2));
    i = j + 1;
    const size_t colon = inner.find(':');
    const std::string_view ns = colon == std::string_view::npos ? std::string_view() : inner.substr(0, colon);
    bool skip = false;
    for (const char* p : {"file", "image", "category", "media", "wikipedia", "wp", "help", "template", "portal",
                          "special", "draft", "user", "s", "wikt", "wiktionary", "commons"})
      if (ns.size() == std::strlen(p) && ieq_prefix(ns, p)) skip = true;
    if (!skip && ns.size() >= 2 && ns.size() <= 3) {  // interlanguage: [[de:...]]
      bool lower = true;
      for (char c : ns) lower = lower && std::islower(static_cast<unsigned char>(c));
      skip = lower;
    }
    if (skip) continue;
    const size_t bar = inner.rfind('|');
    std::string_view text = bar == std::string_view::npos ? inner : inner.substr(bar + 1);
    if (bar == std::string_view::npos) {
      const size_t hash = text.find('#');
      if (hash == 0) text = text.substr(1);
    }
    out.append(convert_links(text));
  }
  return out;
}

// [http://x label] -> label; [http://x] -> "".
std::string convert_external_links(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '[' && (s.compare(i + 1, 4, "http") == 0 || s.compare(i + 1, 2, "//") == 0)) {
      const size_t close = s.find(']', i);
      if (close != std::string_view::npos) {
        std::string_view inner = s.substr(i + 1, close - i - 1);
        const size_t sp = inner.find(' ');
        if (sp != std::string_view::npos) out.append(inner.substr(sp + 1));
        i = close + 1;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

}  // namespace

std::string decode_entities(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '&') {
      out.push_back(s[i++]);
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 10) {
      out.push_back(s[i++]);
      continue;
    }
    const std::string_view e = s.substr(i + 1, semi - i - 1);
    uint32_t cp = 0;
    if (!e.empty() && e[0] == '#') {
      const bool hex = e.size() > 1 && (e[1] == 'x' || e[1] == 'X');
      cp = static_cast<uint32_t>(std::strtoul(std::string(e.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10));
    } else if (e == "lt")
      cp = '<';
    else if (e == "gt")
      cp = '>';
    else if (e == "amp")
      cp = '&';
    else if (e == "quot")
      cp = '"';
    else if (e == "apos")
      cp = '\'';
    else if (e == "nbsp")
      cp = ' ';
    else if (e == "ndash")
      cp = 0x2013;
    else if (e == "mdash")
      cp = 0x2014;
    else if (e == "hellip")
      cp = 0x2026;
    else if (e == "minus")
      cp = 0x2212;
    else if (e == "times")
      cp = 0xD7;
    if (cp == 0 || cp > 0x10FFFF) {
      out.push_back(s[i++]);
      continue;
    }
    append_utf8(out, cp);
    i = semi + 1;
  }
  return out;
}

std::string wikitext_to_plain(std::string_view wt) {
  std::string s = decode_entities(wt);  // HTML entities inside the wikitext
  s = remove_nested(s, "<!--", "-->");
  s = strip_tags(s);
  s = remove_nested(s, "{{", "}}");
  s = remove_nested(s, "{|", "|}");
  s = convert_links(s);
  s = convert_external_links(s);
  std::string out, para;
  size_t pos = 0;
  auto flush = [&]() {
    if (!para.empty()) {
      if (!out.empty()) out += "\n";
      out += para + "\n";
      para.clear();
    }
  };
  while (pos <= s.size()) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) nl = s.size();
    std::string line = s.substr(pos, nl - pos);
    pos = nl + 1;
    // bold/italic quotes, magic words
    for (const char* q : {"'''''", "'''", "''"}) {
      size_t k;
      while ((k = line.find(q)) != std::string::npos) line.erase(k, std::strlen(q));
    }
    size_t mw;
    while ((mw = line.find("__")) != std::string::npos) {
      const size_t end = line.find("__", mw + 2);
      if (end == std::string::npos) break;
      line.erase(mw, end + 2 - mw);
    }
    size_t a = 0, b = line.size();
    while (a < b && std::isspace(static_cast<unsigned char>(line[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(line[b - 1]))) --b;
    line = line.substr(a, b - a);
    if (line.empty()) {
      flush();
      continue;
    }
    const char c0 = line[0];
    if (c0 == '=' || c0 == '*' || c0 == '#' || c0 == ':' || c0 == ';' || c0 == '|' || c0 == '!' ||
        line.compare(0, 4, "----") == 0) {  // headings, lists, indents, table remnants, rules
      flush();
      continue;
    }
    std::string clean;  // collapse runs of spaces, drop empty parentheses left by removed templates
    for (char c : line) {
      if (c == ' ' && !clean.empty() && clean.back() == ' ') continue;
      clean.push_back(c);
    }
    size_t ep;
    while ((ep = clean.find("()")) != std::string::npos) clean.erase(ep, 2);
    while ((ep = clean.find(" ,")) != std::string::npos) clean.erase(ep, 1);
    while ((ep = clean.find(" .")) != std::string::npos) clean.erase(ep, 1);
    while ((ep = clean.find("  ")) != std::string::npos) clean.erase(ep, 1);
    if (clean.empty() || clean == " ") continue;
    if (!para.empty()) para.push_back(' ');
    para += clean;
  }
  flush();
  return out;
}

void read_wikipedia_dump(const std::string& path,
                         const std::function<void(const std::string&, const std::string&)>& on_article,
                         WikiStats* stats, const std::function<void(uint64_t, uint64_t)>& on_progress) {
  Source src(path);
  const uint64_t file_size = src.size();
  std::string buf;
  bool eof = false;
  size_t scan = 0;
  WikiStats st;
  bool saw_mediawiki = false;
  for (;;) {
    const size_t end = buf.find("</page>", scan);
    if (end == std::string::npos) {
      if (eof) break;
      scan = buf.size() > 7 ? buf.size() - 7 : 0;
      if (src.read(buf, 1 << 20) == 0) eof = true;
      if (on_progress) on_progress(src.position(), file_size);
      if (!saw_mediawiki && buf.size() > 0) {
        const size_t lt = buf.find('<');
        BERTCC_CHECK(lt != std::string::npos || buf.size() < 4096, path, ": not an XML file");
        saw_mediawiki = buf.find("<mediawiki") != std::string::npos || buf.size() < 4096;
        BERTCC_CHECK(saw_mediawiki || !eof, path, ": not a MediaWiki XML dump (no <mediawiki> element)");
      }
      continue;
    }
    const size_t start = buf.rfind("<page>", end);
    BERTCC_CHECK(start != std::string::npos, path, ": malformed XML: </page> without <page>");
    const std::string_view page(buf.data() + start, end - start);
    ++st.pages;
    bool ok;
    const std::string title = decode_entities(between(page, "<title", "</title>", &ok));
    const std::string ns = between(page, "<ns", "</ns>", &ok);
    if (page.find("<redirect") != std::string_view::npos) {
      ++st.redirects;
    } else if (ok && ns != "0") {
      ++st.other_namespaces;
    } else {
      const std::string text = between(page, "<text", "</text>", &ok);
      BERTCC_CHECK(ok, path, ": malformed XML: page '", title, "' has no <text> element");
      ++st.articles;
      on_article(title, decode_entities(text));
    }
    buf.erase(0, end + 7);
    scan = 0;
  }
  BERTCC_CHECK(buf.find("<page>") == std::string::npos, path, ": truncated XML: a <page> is never closed");
  BERTCC_CHECK(saw_mediawiki, path, ": not a MediaWiki XML dump (no <mediawiki> element)");
  if (stats) *stats = st;
}

}  // namespace bertcc
