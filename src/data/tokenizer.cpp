#include "bertcc/tokenizer.h"

#include <omp.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/utf8.h"

namespace bertcc {

// ----------------------------------------------------------------------------------- Vocab
Vocab Vocab::from_tokens(std::vector<std::string> tokens, const std::string& where) {
  Vocab v;
  v.source_ = where;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i) v.index_[v.tokens_[i]] = static_cast<int32_t>(i);  // last wins
  v.unk_ = v.id("[UNK]");
  BERTCC_CHECK(v.unk_ >= 0, where, ": the vocabulary has no [UNK] token");
  return v;
}

Vocab Vocab::load(const std::string& path) {
  const std::string text = read_text_file(path, kMaxVocabBytes, "vocabulary");
  std::vector<std::string> tokens;
  size_t start = 0, line = 1;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string tok = text.substr(start, end - start);
    while (!tok.empty() && (tok.back() == '\r' || tok.back() == ' ' || tok.back() == '\t')) tok.pop_back();
    BERTCC_CHECK(!tok.empty(), path, ":", line, ": empty vocabulary entry");
    // As Hugging Face's loader (Python reading UTF-8) refuses it; an invalid entry could never match.
    for (size_t i = 0; i < tok.size();) {
      const size_t at = i;
      bool invalid = false;
      decode_utf8(reinterpret_cast<const unsigned char*>(tok.data()), tok.size(), i, invalid);
      BERTCC_CHECK(!invalid, path, ":", line, ": vocabulary entry is not valid UTF-8 (byte ", at + 1, ")");
    }
    tokens.push_back(std::move(tok));
    start = end + 1;
    ++line;
  }
  BERTCC_CHECK(!tokens.empty(), path, ": empty vocabulary file");
  return from_tokens(std::move(tokens), path);
}

int32_t Vocab::id(std::string_view token) const {
  auto it = index_.find(std::string(token));
  return it == index_.end() ? -1 : it->second;
}

bool Vocab::looks_uncased() const {
  for (const auto& t : tokens_) {
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') continue;
    for (unsigned char c : t)
      if (c >= 'A' && c <= 'Z') return false;
  }
  return true;
}

// ------------------------------------------------------------------------------- Tokenizer
namespace {

enum : uint8_t { kNormal = 0, kSkip = 1, kSpace = 2, kPunct = 3, kCjk = 4 };

bool is_cjk(uint32_t cp) {  // the ranges of HF tokenizers' BertNormalizer
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_white_space(uint32_t cp) {  // Unicode White_Space (Rust char::is_whitespace)
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_other(uint32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
         c == UTF8PROC_CATEGORY_CO || c == UTF8PROC_CATEGORY_CN;
}

bool is_punct(uint32_t cp) {
  if (cp < 128)
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_PC || c == UTF8PROC_CATEGORY_PD || c == UTF8PROC_CATEGORY_PS ||
         c == UTF8PROC_CATEGORY_PE || c == UTF8PROC_CATEGORY_PI || c == UTF8PROC_CATEGORY_PF ||
         c == UTF8PROC_CATEGORY_PO;
}

uint8_t classify(uint32_t cp) {
  if (cp == 0 || cp == 0xFFFD) return kSkip;
  if (cp == '\t' || cp == '\n' || cp == '\r') return kSpace;
  if (is_other(cp)) return kSkip;  // control filter runs before the whitespace map
  if (is_white_space(cp)) return kSpace;
  if (is_cjk(cp)) return kCjk;
  if (is_punct(cp)) return kPunct;
  return kNormal;
}

// Byte-level trie; children in one open-addressing table keyed by (node << 8 | byte).
struct Trie {
  std::vector<int32_t> value{-1};  // token id per node
  std::vector<uint64_t> keys;
  std::vector<int32_t> child;
  size_t mask = 0;
  std::array<int32_t, 256> root{};

  int32_t find(int32_t node, unsigned char b) const {
    if (node == 0) return root[b];
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    for (size_t h = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;; h = (h + 1) & mask) {
      if (keys[h] == key) return child[h];
      if (keys[h] == 0) return -1;
    }
  }
  // LinMaxMatch ("Fast WordPiece Tokenization", Song et al. 2021): failure link and failure pops
  // per node; fail_link = -1 means "no way to continue" (the word becomes [UNK]).
  std::vector<int32_t> fail_link, pops_off, pops_len, pops;
  int32_t suffix_root = -1;  // the node for "##"
  std::vector<std::vector<std::pair<unsigned char, int32_t>>> kids;

  void build(const std::vector<std::pair<std::string, int32_t>>& entries) {
    root.fill(-1);
    std::unordered_map<uint64_t, int32_t> tmp;
    for (const auto& [s, id] : entries) {
      int32_t node = 0;
      for (unsigned char b : s) {
        const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
        auto it = tmp.find(key);
        if (it == tmp.end()) {
          const int32_t nn = static_cast<int32_t>(value.size());
          value.push_back(-1);
          it = tmp.emplace(key, nn).first;
          if (node == 0) root[b] = nn;
        }
        node = it->second;
      }
      if (id >= 0) value[static_cast<size_t>(node)] = id;  // id -1: path only
    }
    kids.assign(value.size(), {});
    for (const auto& [key, nn] : tmp)
      kids[static_cast<size_t>(key >> 8)].emplace_back(static_cast<unsigned char>(key & 0xFF), nn);
    for (auto& k : kids) std::sort(k.begin(), k.end());
    size_t cap = 16;
    while (cap < tmp.size() * 2) cap *= 2;
    mask = cap - 1;
    keys.assign(cap, 0);
    child.assign(cap, -1);
    for (const auto& [key, nn] : tmp) {
      if ((key >> 8) == 0) continue;  // root edges live in `root`
      size_t h = (key * 0x9E3779B97F4A7C15ull) >> 20 & mask;
      while (keys[h] != 0) h = (h + 1) & mask;
      keys[h] = key;
      child[h] = nn;
    }
  }

  // Requires the "##" path to exist (the vocabulary has at least one continuation piece).
  void build_failure_links() {
    const size_t n = value.size();
    fail_link.assign(n, -1);
    pops_off.assign(n, 0);
    pops_len.assign(n, 0);
    pops.clear();
    const int32_t hash1 = root['#'];
    suffix_root = hash1 >= 0 ? find(hash1, '#') : -1;
    std::vector<int32_t> queue{0};
    if (suffix_root >= 0) queue.push_back(suffix_root);  // BFS from both roots
    std::vector<char> seen(n, 0);
    seen[0] = 1;
    if (suffix_root >= 0) seen[static_cast<size_t>(suffix_root)] = 1;
    for (size_t qi = 0; qi < queue.size(); ++qi) {
      const int32_t u = queue[qi];
      for (const auto& [c, v] : kids[static_cast<size_t>(u)]) {
        if (seen[static_cast<size_t>(v)]) continue;  // suffix_root keeps f = null, F = []
        seen[static_cast<size_t>(v)] = 1;
        queue.push_back(v);
        if (value[static_cast<size_t>(v)] >= 0) {  // a token: emit it, continue with "##"
          if (suffix_root < 0) continue;
          pops_off[static_cast<size_t>(v)] = static_cast<int32_t>(pops.size());
          pops.push_back(value[static_cast<size_t>(v)]);
          pops_len[static_cast<size_t>(v)] = 1;
          fail_link[static_cast<size_t>(v)] = suffix_root;
          continue;
        }
        std::vector<int32_t> Z(pops.begin() + pops_off[static_cast<size_t>(u)],
                               pops.begin() + pops_off[static_cast<size_t>(u)] + pops_len[static_cast<size_t>(u)]);
        int32_t z = fail_link[static_cast<size_t>(u)];
        while (z >= 0 && find(z, c) < 0) {
          Z.insert(Z.end(), pops.begin() + pops_off[static_cast<size_t>(z)],
                   pops.begin() + pops_off[static_cast<size_t>(z)] + pops_len[static_cast<size_t>(z)]);
          z = fail_link[static_cast<size_t>(z)];
        }
        if (z < 0) continue;  // f(v) = null
        fail_link[static_cast<size_t>(v)] = find(z, c);
        pops_off[static_cast<size_t>(v)] = static_cast<int32_t>(pops.size());
        pops_len[static_cast<size_t>(v)] = static_cast<int32_t>(Z.size());
        pops.insert(pops.end(), Z.begin(), Z.end());
      }
    }
    kids.clear();
    kids.shrink_to_fit();
  }
};

// Per code point: class, and (uncased) the normalised replacement (NFD, no Mn, lowercase). They
// depend only on the casing, so they are built once per process for each (1.1 million code points
// through utf8proc) and shared by every tokenizer.
struct UnicodeTables {
  std::vector<uint8_t> cls;        // 0x110000 entries
  std::vector<uint32_t> norm_off;  // offset into norm_pool, or UINT32_MAX for identity
  std::vector<uint8_t> norm_len;
  std::vector<uint32_t> norm_pool;
  std::array<uint8_t, 128> ascii_cls{};
  std::array<char, 128> ascii_map{};

  explicit UnicodeTables(bool lower_case) {
    UnicodeTables& m = *this;
    constexpr uint32_t kMax = 0x110000;
    m.cls.resize(kMax);
    m.norm_off.assign(kMax, UINT32_MAX);
    m.norm_len.assign(kMax, 0);
    for (uint32_t cp = 0; cp < kMax; ++cp) {
      m.cls[cp] = classify(cp);
      if (!lower_case || cp < 128 || m.cls[cp] == kSkip || m.cls[cp] == kSpace) continue;
      // NFD (canonical decomposition), drop nonspacing marks, lowercase (full mapping: U+0130 expands).
      utf8proc_int32_t buf[32];
      int last = 0;
      const utf8proc_ssize_t nd =
          utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 32, UTF8PROC_DECOMPOSE, &last);
      std::vector<uint32_t> out;
      for (utf8proc_ssize_t j = 0; j < std::max<utf8proc_ssize_t>(nd, 0); ++j) {
        const auto d = buf[j];
        if (utf8proc_category(d) == UTF8PROC_CATEGORY_MN) continue;
        if (d == 0x130) {
          out.push_back(0x69);
          out.push_back(0x307);
        } else {
          out.push_back(static_cast<uint32_t>(utf8proc_tolower(d)));
        }
      }
      if (nd < 0) out = {cp};
      if (out.size() == 1 && out[0] == cp) continue;
      m.norm_off[cp] = static_cast<uint32_t>(m.norm_pool.size());
      m.norm_len[cp] = static_cast<uint8_t>(out.size());
      m.norm_pool.insert(m.norm_pool.end(), out.begin(), out.end());
    }
    for (uint32_t c = 0; c < 128; ++c) {
      m.ascii_cls[c] = m.cls[c];
      m.ascii_map[c] = static_cast<char>(lower_case && c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
  }
};

const UnicodeTables& unicode_tables(bool lower_case) {
  if (lower_case) {
    static const UnicodeTables uncased(true);  // thread-safe initialisation, once
    return uncased;
  }
  static const UnicodeTables cased(false);
  return cased;
}

}  // namespace

struct BertTokenizer::Impl {
  explicit Impl(const UnicodeTables& t) : u(t) {}
  const UnicodeTables& u;
  const std::vector<uint8_t>& cls = u.cls;
  const std::vector<uint32_t>& norm_off = u.norm_off;
  const std::vector<uint8_t>& norm_len = u.norm_len;
  const std::vector<uint32_t>& norm_pool = u.norm_pool;
  const std::array<uint8_t, 128>& ascii_cls = u.ascii_cls;
  const std::array<char, 128>& ascii_map = u.ascii_map;
  Trie trie;                                              // every vocabulary entry, "##" pieces with their prefix
  std::vector<std::pair<std::string, int32_t>> specials;  // longest first
  int32_t unk = -1;
  bool lower = true;

  // Greedy longest-match-first WordPiece in time linear in the word's length (LinMaxMatch).
  void word_piece(const std::string& w, int64_t nchars, std::vector<int32_t>& ids, TokenizeStats* st) const {
    if (w.empty()) return;
    const size_t mark = ids.size();
    auto unk_word = [&]() {
      ids.resize(mark);
      ids.push_back(unk);
      if (st) ++st->unknown;
    };
    if (nchars > 100) return unk_word();
    const auto* s = reinterpret_cast<const unsigned char*>(w.data());
    int32_t u = 0;
    auto pop = [&](int32_t node) {
      const int32_t off = trie.pops_off[static_cast<size_t>(node)], len = trie.pops_len[static_cast<size_t>(node)];
      ids.insert(ids.end(), trie.pops.begin() + off, trie.pops.begin() + off + len);
    };
    for (size_t i = 0; i < w.size(); ++i) {
      int32_t v;
      while ((v = trie.find(u, s[i])) < 0) {
        const int32_t f = trie.fail_link[static_cast<size_t>(u)];
        if (f < 0) return unk_word();
        pop(u);
        u = f;
      }
      u = v;
    }
    while (u != trie.suffix_root) {  // end of word: flush the pending match
      const int32_t f = trie.fail_link[static_cast<size_t>(u)];
      if (f < 0) return unk_word();
      pop(u);
      u = f;
    }
  }

  // Runs `emit(word, nchars)` for every basic token of a text segment without special tokens.
  template <class Emit>
  void basic(std::string_view text, TokenizeStats* st, Emit emit) const {
    std::string word;
    word.reserve(64);
    int64_t nchars = 0;
    auto flush = [&]() {
      if (!word.empty()) emit(word, nchars);
      word.clear();
      nchars = 0;
    };
    auto single = [&](uint32_t cp) {
      flush();
      append_utf8(word, cp);
      nchars = 1;
      flush();
    };
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
      const unsigned char c = s[i];
      if (c < 0x80) {
        ++i;
        switch (ascii_cls[c]) {
          case kSkip:
            break;
          case kSpace:
            flush();
            break;
          case kPunct:
            single(c);
            break;
          default:
            word.push_back(ascii_map[c]);
            ++nchars;
            break;
        }
        continue;
      }
      bool invalid = false;
      const uint32_t cp = decode_utf8(s, n, i, invalid);
      if (invalid && st) ++st->invalid_utf8;
      const uint8_t k = cls[cp];
      if (k == kSkip) continue;
      if (k == kSpace) {
        flush();
        continue;
      }
      const bool mapped = norm_off[cp] != UINT32_MAX;
      const uint32_t* seq = mapped ? norm_pool.data() + norm_off[cp] : &cp;
      const size_t len = mapped ? norm_len[cp] : 1;
      if (k == kCjk) {
        flush();
        for (size_t j = 0; j < len; ++j) {
          append_utf8(word, seq[j]);
          ++nchars;
        }
        flush();
        continue;
      }
      for (size_t j = 0; j < len; ++j) {
        const uint32_t o = seq[j];
        if ((o < 128 && ascii_cls[o] == kPunct) || (o >= 128 && cls[o] == kPunct)) {
          single(o);
        } else {
          append_utf8(word, o);
          ++nchars;
        }
      }
    }
    flush();
  }

  // Splits out special tokens (matched in the raw text), handing the rest to `segment`.
  template <class Seg, class Special>
  void split_specials(std::string_view text, Seg segment, Special special) const {
    size_t seg = 0, pos = 0;
    while (pos < text.size()) {
      pos = text.find('[', pos);
      if (pos == std::string_view::npos) break;
      bool hit = false;
      for (const auto& [tok, id] : specials) {
        if (text.compare(pos, tok.size(), tok) == 0) {
          segment(text.substr(seg, pos - seg));
          special(id);
          pos += tok.size();
          seg = pos;
          hit = true;
          break;
        }
      }
      if (!hit) ++pos;
    }
    segment(text.substr(seg));
  }
};

BertTokenizer::BertTokenizer(const Vocab& vocab, bool lower_case)
    : vocab_(vocab), lower_(lower_case), impl_(std::make_unique<Impl>(unicode_tables(lower_case))) {
  Impl& m = *impl_;
  m.lower = lower_case;
  m.unk = vocab.unk_id();
  std::vector<std::pair<std::string, int32_t>> all;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& t = vocab.token(id);
    if (vocab.id(t) != id) continue;  // duplicates: the last occurrence wins, as in HF
    // A word of more than 100 characters is [UNK] (HF's max_input_chars_per_word), so a longer
    // entry can never match: it stays out of the trie, whose failure links would cost time and
    // memory quadratic in its length (a 40,000-character entry took 4 GB).
    if (utf8_length(t) > 102) continue;
    all.emplace_back(t, id);
  }
  all.emplace_back("##", -1);  // the suffix root always exists (it is not itself a token here)
  m.trie.build(all);
  m.trie.build_failure_links();
  for (const char* sp : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (vocab.id(sp) >= 0) m.specials.emplace_back(sp, vocab.id(sp));
  std::sort(m.specials.begin(), m.specials.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

BertTokenizer::~BertTokenizer() = default;

void BertTokenizer::encode(std::string_view text, std::vector<int32_t>& ids, TokenizeStats* stats) const {
  const Impl& m = *impl_;
  m.split_specials(
      text,
      [&](std::string_view seg) {
        m.basic(seg, stats, [&](const std::string& w, int64_t nchars) { m.word_piece(w, nchars, ids, stats); });
      },
      [&](int32_t id) { ids.push_back(id); });
}

std::vector<int32_t> BertTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, ids);
  return ids;
}

void BertTokenizer::basic_tokenize(std::string_view text, std::vector<std::string>& words, TokenizeStats* stats) const {
  const Impl& m = *impl_;
  m.split_specials(
      text,
      [&](std::string_view seg) { m.basic(seg, stats, [&](const std::string& w, int64_t) { words.push_back(w); }); },
      [&](int32_t id) { words.push_back(vocab_.token(id)); });
}

std::vector<std::vector<int32_t>> BertTokenizer::encode_batch(const std::vector<std::string_view>& texts, int threads,
                                                              TokenizeStats* stats) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  std::vector<TokenizeStats> per(static_cast<size_t>(nt));
  const int64_t n = static_cast<int64_t>(texts.size());
#pragma omp parallel for schedule(dynamic, 256) num_threads(nt)
  for (int64_t i = 0; i < n; ++i)
    encode(texts[static_cast<size_t>(i)], out[static_cast<size_t>(i)], &per[static_cast<size_t>(omp_get_thread_num())]);
  if (stats)
    for (const auto& p : per) {
      stats->invalid_utf8 += p.invalid_utf8;
      stats->unknown += p.unknown;
    }
  return out;
}

}  // namespace bertcc
