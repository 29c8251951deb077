#include "bertcc/corpus.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <tuple>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/rng.h"
#include "bertcc/run_lock.h"
#include "bertcc/utf8.h"
#include "bertcc/wikipedia.h"

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

// ---- prep-corpus
namespace {
namespace fs = std::filesystem;

bool ends_with(const std::string& p, const char* suf) {
  const size_t n = std::strlen(suf);
  return p.size() >= n && p.compare(p.size() - n, n, suf) == 0;
}

// A folder's text files (.txt, .text or no extension), recursively, in name order; never a
// temporary file another write left (NAME.tmp.DIGITS).
void collect(const std::string& path, std::vector<std::string>& files) {
  BERTCC_CHECK(fs::exists(path), path, ": no such file or folder");
  if (!fs::is_directory(path)) {
    files.push_back(path);
    return;
  }
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(path))
    if (e.is_regular_file() && !is_temp_file_name(e.path().string())) found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  for (auto& f : found) {
    const std::string ext = fs::path(f).extension().string();
    if (ext == ".txt" || ext == ".text" || ext.empty()) files.push_back(f);
  }
}

// Every shard is open at once: more than the open-file limit would fail midway ("Too many open
// files"). The soft limit is raised to the hard one when that is enough, else the run is refused.
void check_open_file_limit(int shards) {
  const rlim_t need = static_cast<rlim_t>(shards) + 64;  // (stdio, the input, libraries' own files)
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return;
  if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) {
    rl.rlim_cur = need;
    if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) return;
  }
  fail("--shards ", shards, ": the shards are written all at once, which needs ", need,
       " open files, above this process's limit of ", rl.rlim_cur, " (hard limit ", rl.rlim_max,
       "); pass fewer --shards or raise the limit (ulimit -n ", need, ")");
}

struct Shard {
  std::string tmp, final_path;
  FILE* f = nullptr;
  uint64_t bytes = 0;
  int64_t docs = 0;
};

// The train and held-out shards of one run: made under temporary names, renamed by commit();
// destroyed uncommitted (an error anywhere), it removes every temporary shard made so far and
// the folders the run made, and releases the output folder's lock.
class ShardSet {
 public:
  explicit ShardSet(const CorpusPrepOptions& o) : o_(o), pick_{o.seed, 0} {}
  // The folders, the lock and every shard (after construction: the destructor cleans up a failure).
  void open_all(int n_test) {
    for (const fs::path& d : {fs::path(o_.output), fs::path(o_.output) / "train", fs::path(o_.output) / "test"}) {
      if (d.filename() == "test" && !n_test) break;
      if (!fs::exists(d)) made_.push_back(d);
      std::error_code ec;
      fs::create_directories(d, ec);
      BERTCC_CHECK(!ec, "--output-dir: cannot create ", d.string(), ": ", ec.message());
      if (d == fs::path(o_.output)) lock_ = RunLock(o_.output, "--output-dir", "prep-corpus");
    }
    open(train_, "train", o_.shards);
    open(test_, "test", n_test);
  }
  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;
  ~ShardSet();

  // The smallest shard of the train or held-out pool takes the next document.
  Shard& pick() {
    const bool held_out = !test_.empty() && u32_to_unit(pick_.next_u32()) < o_.test_fraction;
    std::vector<Shard>& pool = held_out ? test_ : train_;
    return *std::min_element(pool.begin(), pool.end(),
                             [](const Shard& a, const Shard& b) { return a.bytes < b.bytes; });
  }
  void commit(CorpusPrepResult& r);

 private:
  void open(std::vector<Shard>& v, const char* split, int n);

  const CorpusPrepOptions& o_;
  Rng pick_;
  std::vector<fs::path> made_;
  RunLock lock_;
  std::vector<Shard> train_, test_;
  bool done_ = false;
};

// (opened into the members the destructor cleans: a failure at shard 900 removes the 899 before it)
void ShardSet::open(std::vector<Shard>& v, const char* split, int n) {
  v.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "part-%05d.txt", i);
    v[i].final_path = (fs::path(o_.output) / split / name).string();
    const std::string tmp = v[i].final_path + ".tmp." + std::to_string(::getpid());
    v[i].f = std::fopen(tmp.c_str(), "wb");
    BERTCC_CHECK(v[i].f, tmp, ": cannot create: ", std::strerror(errno));
    v[i].tmp = tmp;
  }
}

ShardSet::~ShardSet() {
  if (done_) return;
  for (auto* pool : {&train_, &test_})
    for (auto& s : *pool) {
      if (s.f) std::fclose(s.f);
      if (!s.tmp.empty()) std::remove(s.tmp.c_str());
    }
  lock_.release();
  std::error_code ec;  // (fs::remove removes an empty folder only)
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) fs::remove(*it, ec);
}

// Closes every shard, refuses an empty one (it would only fail the next step), renames them all.
void ShardSet::commit(CorpusPrepResult& r) {
  for (auto* pool : {&train_, &test_})
    for (auto& s : *pool) {
      const bool ok = std::fflush(s.f) == 0 && ::fsync(fileno(s.f)) == 0;
      std::fclose(s.f);
      s.f = nullptr;
      BERTCC_CHECK(ok, s.tmp, ": write failed");
    }
  for (const auto& s : test_) r.held_out += s.docs;
  BERTCC_CHECK(test_.empty() || r.held_out > 0, "prep-corpus: --test-fraction ", o_.test_fraction,
               " held out none of the ", r.docs,
               " documents (each one is held out with that probability): raise it, give more documents, "
               "or leave it at 0");
  for (const auto& [pool, split, n_docs] :
       {std::tuple{&train_, "train", r.docs - r.held_out}, std::tuple{&test_, "test", r.held_out}})
    for (const auto& s : *pool)
      BERTCC_CHECK(s.docs > 0, "prep-corpus: ", s.final_path, " would be empty: ", n_docs, " ", split,
                   " document(s) for ", pool->size(), " ", split, " shard(s); ",
                   std::string(split) == "train"
                       ? "pass --shards " + std::to_string(std::max<int64_t>(1, n_docs)) + " or fewer"
                       : std::string("pass fewer --shards or a larger --test-fraction"));
  for (auto* pool : {&train_, &test_})
    for (auto& s : *pool)
      BERTCC_CHECK(std::rename(s.tmp.c_str(), s.final_path.c_str()) == 0, s.final_path,
                   ": rename failed: ", std::strerror(errno));
  done_ = true;
  lock_.release();
  r.train_shards = train_.size();
  r.test_shards = test_.size();
}

// One run's documents into its shards, with the counts the summary gives.
class CorpusWriter {
 public:
  CorpusWriter(const CorpusPrepOptions& o, ShardSet& shards, CorpusPrepResult& r)
      : o_(o), shards_(shards), r_(r), nt_(o.threads > 0 ? o.threads : 1), tty_(::isatty(2)) {}
  void text_files(const std::vector<std::string>& files);
  void dump(const std::string& path);

 private:
  void write_doc(const std::string& text, int64_t nsent);
  void stream_doc(const std::string& path);
  void note_invalid(const std::string& path, int64_t bad) {
    r_.invalid_utf8 += bad;
    if (bad) std::cerr << "prep-corpus: " << path << ": " << bad << " invalid UTF-8 sequence(s) replaced\n";
  }

  const CorpusPrepOptions& o_;
  ShardSet& shards_;
  CorpusPrepResult& r_;
  const int nt_;
  const bool tty_;
};

void CorpusWriter::write_doc(const std::string& text, int64_t nsent) {
  if (text.empty()) {
    ++r_.empty_docs;
    return;
  }
  ++r_.docs;
  r_.sentences += nsent;
  Shard& s = shards_.pick();
  if (s.docs) std::fputc('\n', s.f);  // blank line between documents
  std::fwrite(text.data(), 1, text.size(), s.f);
  s.bytes += text.size();
  ++s.docs;
}

// A file above --stream-above-mb, read paragraph by paragraph so that memory stays bounded.
void CorpusWriter::stream_doc(const std::string& path) {
  std::ifstream in;
  open_text_input(in, path);
  Shard* shard = nullptr;
  int64_t n = 0, bad = 0;
  std::string line, para;
  auto flush = [&]() {
    if (para.empty()) return;
    bad += sanitize_utf8(para);
    for (const auto& sent : split_sentences(para)) {
      if (!shard) {
        shard = &shards_.pick();
        if (shard->docs) std::fputc('\n', shard->f);
        ++shard->docs;
      }
      std::fwrite(sent.data(), 1, sent.size(), shard->f);
      std::fputc('\n', shard->f);
      shard->bytes += sent.size() + 1;
      ++n;
    }
    para.clear();
  };
  while (std::getline(in, line)) {
    const bool blank = line.find_first_not_of(" \t\r\f\v") == std::string::npos;
    if (blank) {
      flush();
    } else {
      if (!para.empty()) para.push_back(' ');
      para += line;
    }
  }
  BERTCC_CHECK(!in.bad(), path, ": read error");
  flush();
  note_invalid(path, bad);
  if (n) {
    ++r_.docs;
    r_.sentences += n;
  } else {
    ++r_.empty_docs;
  }
}

// Text files in batches: each batch segmented in parallel, then written in input order (a file
// above --stream-above-mb is streamed in its place).
void CorpusWriter::text_files(const std::vector<std::string>& files) {
  const size_t batch = static_cast<size_t>(std::max(4, 4 * nt_));
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t in_bytes = 0, total_bytes = 0;
  for (const auto& f : files) total_bytes += fs::file_size(f);
  const uintmax_t stream_bytes = static_cast<uintmax_t>(o_.stream_above_mb * 1048576.0);
  for (size_t b0 = 0; b0 < files.size(); b0 += batch) {
    const size_t b1 = std::min(files.size(), b0 + batch);
    std::vector<std::string> out(b1 - b0), err(b1 - b0);
    std::vector<int64_t> nsent(b1 - b0, 0), bad(b1 - b0, 0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt_)
    for (size_t k = b0; k < b1; ++k) {
      if (fs::file_size(files[k]) > stream_bytes) continue;  // streamed below, in order
      try {
        std::string text = read_text_file(files[k]);
        bad[k - b0] = sanitize_utf8(text);
        for (const auto& s : segment_document(text)) {
          out[k - b0] += s;
          out[k - b0] += '\n';
          ++nsent[k - b0];
        }
      } catch (const std::exception& e) {
        err[k - b0] = e.what();
      }
    }
    for (size_t k = b0; k < b1; ++k) {
      BERTCC_CHECK(err[k - b0].empty(), err[k - b0]);
      in_bytes += fs::file_size(files[k]);
      note_invalid(files[k], bad[k - b0]);
      if (fs::file_size(files[k]) > stream_bytes)
        stream_doc(files[k]);
      else
        write_doc(out[k - b0], nsent[k - b0]);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = in_bytes / std::max(secs, 1e-9);
    char line[200];
    std::snprintf(line, sizeof line, "prep-corpus: %zu/%zu files, %.1f/%.1f MB, %.1f MB/s, ETA %.0f s", b1,
                  files.size(), in_bytes / 1e6, total_bytes / 1e6, rate / 1e6,
                  (total_bytes - in_bytes) / std::max(rate, 1.0));
    if (tty_)
      std::cerr << "\r" << line << std::flush;
    else if (b1 == files.size() || (b0 / batch) % 50 == 0)
      std::cerr << line << "\n";
  }
  if (tty_ && !files.empty()) std::cerr << "\n";
}

// A Wikipedia dump: articles in batches of 512, each batch converted and segmented in parallel.
void CorpusWriter::dump(const std::string& path) {
  std::vector<std::string> batch_text;
  WikiStats ws;
  uint64_t done = 0, total = 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = [&](bool last) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = done / std::max(secs, 1e-9);
    char line[300];
    std::snprintf(line, sizeof line, "prep-corpus: %s: %.1f/%.1f MB, %lld articles, %.1f MB/s, ETA %.0f s",
                  path.c_str(), done / 1e6, total / 1e6, static_cast<long long>(r_.docs), rate / 1e6,
                  (total - std::min(done, total)) / std::max(rate, 1.0));
    if (tty_)
      std::cerr << "\r" << line << std::flush;
    else if (last)
      std::cerr << line << "\n";
  };
  auto run_batch = [&]() {
    std::vector<std::string> out(batch_text.size());
    std::vector<int64_t> nsent(batch_text.size(), 0), bad(batch_text.size(), 0);
#pragma omp parallel for schedule(dynamic, 8) num_threads(nt_)
    for (size_t k = 0; k < batch_text.size(); ++k) {
      bad[k] = sanitize_utf8(batch_text[k]);
      for (const auto& s : segment_document(wikitext_to_plain(batch_text[k]))) {
        out[k] += s;
        out[k] += '\n';
        ++nsent[k];
      }
    }
    for (size_t k = 0; k < out.size(); ++k) {
      r_.invalid_utf8 += bad[k];
      write_doc(out[k], nsent[k]);
    }
    batch_text.clear();
    report(false);
  };
  read_wikipedia_dump(
      path,
      [&](const std::string&, const std::string& wikitext) {
        batch_text.push_back(wikitext);
        if (batch_text.size() >= 512) run_batch();
      },
      &ws,
      [&](uint64_t d, uint64_t t) {
        done = d;
        total = std::max<uint64_t>(t, 1);
      });
  run_batch();
  report(true);
  if (tty_) std::cerr << "\n";
  std::cerr << "prep-corpus: " << path << ": " << ws.pages << " pages, " << ws.articles << " articles, " << ws.redirects
            << " redirects and " << ws.other_namespaces << " non-article pages skipped\n";
}
}  // namespace

CorpusPrepResult prepare_corpus(const CorpusPrepOptions& o) {
  std::vector<std::string> files, dumps;
  for (const auto& p : o.inputs) {
    if (ends_with(p, ".xml") || ends_with(p, ".xml.bz2") || ends_with(p, ".bz2")) {
      BERTCC_CHECK(fs::is_regular_file(p), p, ": no such file");
      dumps.push_back(p);
    } else {
      collect(p, files);
    }
  }
  BERTCC_CHECK(!files.empty() || !dumps.empty(), "prep-corpus: no input files");
  for (const auto& p : o.inputs)  // (the shards go to OUTPUT/train and OUTPUT/test)
    for (const char* sub : {"", "train", "test"})
      check_output_not_input((fs::path(o.output) / sub).string(), "--output-dir", p, "--input",
                             /*input_read_whole=*/true);
  const int n_test = o.test_fraction > 0 ? std::max(1, static_cast<int>(o.shards * o.test_fraction + 0.5)) : 0;
  check_open_file_limit(o.shards + n_test);
  CorpusPrepResult r;
  ShardSet shards(o);
  shards.open_all(n_test);
  CorpusWriter w(o, shards, r);
  w.text_files(files);
  for (const auto& d : dumps) w.dump(d);
  shards.commit(r);
  return r;
}

}  // namespace bertcc
