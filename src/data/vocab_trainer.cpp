#include "bertcc/vocab_trainer.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include "bertcc/error.h"

namespace bertcc {
namespace {

std::vector<std::string> utf8_chars(const std::string& w) {
  std::vector<std::string> out;
  for (size_t i = 0; i < w.size();) {
    const unsigned char c = static_cast<unsigned char>(w[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(w.substr(i, len));
    i += len;
  }
  return out;
}

using Pair = std::pair<int32_t, int32_t>;
struct PairHash {
  size_t operator()(const Pair& p) const {
    return std::hash<uint64_t>()((uint64_t(uint32_t(p.first)) << 32) | uint32_t(p.second));
  }
};

// The vocabulary's pieces by id.
struct Symbols {
  std::unordered_map<std::string, int32_t> id;  // symbol -> id
  std::vector<std::string> sym;
  int32_t intern(const std::string& s) {
    auto it = id.find(s);
    if (it != id.end()) return it->second;
    const int32_t k = static_cast<int32_t>(sym.size());
    sym.push_back(s);
    id.emplace(s, k);
    return k;
  }
  const std::string& operator[](int32_t k) const { return sym[static_cast<size_t>(k)]; }
};

using Words = std::vector<std::pair<std::string, int64_t>>;

// The alphabet: the most frequent characters (ties by character), each as "c" and "##c", interned.
// Returns the pieces it added, in order.
std::vector<std::string> intern_alphabet(const Words& words, int64_t limit, Symbols& syms) {
  std::map<std::string, int64_t> char_freq;
  for (const auto& [w, c] : words)
    for (const auto& ch : utf8_chars(w)) char_freq[ch] += c;
  std::vector<std::pair<std::string, int64_t>> chars(char_freq.begin(), char_freq.end());
  std::stable_sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (static_cast<int64_t>(chars.size()) > limit) chars.resize(static_cast<size_t>(limit));
  std::vector<std::string> learned;
  for (const auto& [ch, f] : chars) {
    for (const std::string& s : {ch, "##" + ch}) {
      if (!syms.id.count(s)) learned.push_back(s);
      syms.intern(s);
    }
  }
  return learned;
}

// Words as symbol sequences with their counts; words with a character outside the alphabet are left out.
struct Sequences {
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int64_t> freq;
};
Sequences word_sequences(const Words& words, const Symbols& syms) {
  Sequences out;
  for (const auto& [w, c] : words) {
    std::vector<int32_t> s;
    bool ok = true;
    const auto cs = utf8_chars(w);
    for (size_t i = 0; i < cs.size() && ok; ++i) {
      auto it = syms.id.find(i == 0 ? cs[i] : "##" + cs[i]);
      ok = it != syms.id.end();
      if (ok) s.push_back(it->second);
    }
    if (ok && s.size() >= 1) {
      out.seqs.push_back(std::move(s));
      out.freq.push_back(c);
    }
  }
  return out;
}

// Pair statistics with the words each pair occurs in.
struct PairStats {
  std::unordered_map<Pair, int64_t, PairHash> count;
  std::unordered_map<Pair, std::set<int32_t>, PairHash> where;
};
PairStats pair_stats(const Sequences& w) {
  PairStats st;
  for (size_t k = 0; k < w.seqs.size(); ++k)
    for (size_t i = 0; i + 1 < w.seqs[k].size(); ++i) {
      const Pair p{w.seqs[k][i], w.seqs[k][i + 1]};
      st.count[p] += w.freq[k];
      st.where[p].insert(static_cast<int32_t>(k));
    }
  return st;
}

// `pair` replaced by the symbol m in every word it occurs in (st.where updated); returns how each
// pair's count changes.
std::unordered_map<Pair, int64_t, PairHash> merge_in_words(const Pair& pair, int32_t m, Sequences& words,
                                                           PairStats& st) {
  const std::set<int32_t> affected = st.where[pair];
  std::unordered_map<Pair, int64_t, PairHash> delta;
  for (int32_t w : affected) {
    auto& s = words.seqs[static_cast<size_t>(w)];
    const int64_t f = words.freq[static_cast<size_t>(w)];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const Pair p{s[i], s[i + 1]};
      delta[p] -= f;
      auto wit = st.where.find(p);
      if (wit != st.where.end()) wit->second.erase(w);
    }
    std::vector<int32_t> ns;
    for (size_t i = 0; i < s.size();) {
      if (i + 1 < s.size() && s[i] == pair.first && s[i + 1] == pair.second) {
        ns.push_back(m);
        i += 2;
      } else {
        ns.push_back(s[i++]);
      }
    }
    s.swap(ns);
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const Pair p{s[i], s[i + 1]};
      delta[p] += f;
      st.where[p].insert(w);
    }
  }
  return delta;
}

}  // namespace

std::vector<std::string> train_wordpiece(const WordCounts& counts, const VocabTrainerOptions& o) {
  std::vector<std::string> vocab{"[PAD]"};
  for (int64_t i = 0; i < o.num_unused; ++i) vocab.push_back("[unused" + std::to_string(i) + "]");
  for (const char* s : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) vocab.push_back(s);
  BERTCC_CHECK(o.vocab_size > static_cast<int64_t>(vocab.size()), "--vocab-size ", o.vocab_size,
               " leaves no room after the ", vocab.size(), " special and unused tokens");

  // Words in a fixed order (sorted) so that everything below is deterministic.
  Words words(counts.begin(), counts.end());
  std::sort(words.begin(), words.end());
  Symbols sym;
  std::vector<std::string> learned = intern_alphabet(words, o.limit_alphabet, sym);
  Sequences seqs = word_sequences(words, sym);
  PairStats st = pair_stats(seqs);
  // Max-heap by (count, then smaller left/right strings first); stale entries skipped on pop.
  struct Entry {
    int64_t count;
    Pair pair;
  };
  auto worse = [&](const Entry& a, const Entry& b) {
    if (a.count != b.count) return a.count < b.count;
    const auto& al = sym[a.pair.first];
    const auto& bl = sym[b.pair.first];
    if (al != bl) return al > bl;
    return sym[a.pair.second] > sym[b.pair.second];
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  for (const auto& [p, c] : st.count) heap.push({c, p});

  const int64_t room = o.vocab_size - static_cast<int64_t>(vocab.size());
  while (static_cast<int64_t>(learned.size()) < room && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    auto pc = st.count.find(top.pair);
    if (pc == st.count.end() || pc->second != top.count) continue;  // stale
    if (top.count < o.min_frequency) break;
    const std::string& right = sym[top.pair.second];
    const std::string merged = sym[top.pair.first] + (right.compare(0, 2, "##") == 0 ? right.substr(2) : right);
    const bool is_new = !sym.id.count(merged);
    const int32_t m = sym.intern(merged);
    if (is_new) learned.push_back(merged);
    for (const auto& [p, d] : merge_in_words(top.pair, m, seqs, st)) {
      if (d == 0) continue;
      int64_t& c = st.count[p];
      c += d;
      if (c > 0) heap.push({c, p});
    }
  }
  for (auto& s : learned) vocab.push_back(std::move(s));
  if (static_cast<int64_t>(vocab.size()) > o.vocab_size) vocab.resize(static_cast<size_t>(o.vocab_size));
  return vocab;
}

}  // namespace bertcc
