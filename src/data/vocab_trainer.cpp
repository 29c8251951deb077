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

}  // namespace

std::vector<std::string> train_wordpiece(const WordCounts& counts, const VocabTrainerOptions& o) {
  std::vector<std::string> vocab{"[PAD]"};
  for (int64_t i = 0; i < o.num_unused; ++i) vocab.push_back("[unused" + std::to_string(i) + "]");
  for (const char* s : {"[UNK]", "[CLS]", "[SEP]", "[MASK]"}) vocab.push_back(s);
  BERTCC_CHECK(o.vocab_size > static_cast<int64_t>(vocab.size()), "--vocab-size ", o.vocab_size,
               " leaves no room after the ", vocab.size(), " special and unused tokens");

  // Words in a fixed order (sorted) so that everything below is deterministic.
  std::vector<std::pair<std::string, int64_t>> words(counts.begin(), counts.end());
  std::sort(words.begin(), words.end());

  // Alphabet: the most frequent characters (ties by character), each as "c" and "##c".
  std::map<std::string, int64_t> char_freq;
  for (const auto& [w, c] : words)
    for (const auto& ch : utf8_chars(w)) char_freq[ch] += c;
  std::vector<std::pair<std::string, int64_t>> chars(char_freq.begin(), char_freq.end());
  std::stable_sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (static_cast<int64_t>(chars.size()) > o.limit_alphabet) chars.resize(static_cast<size_t>(o.limit_alphabet));
  std::unordered_map<std::string, int32_t> id;  // symbol -> id (symbols: vocab pieces)
  std::vector<std::string> sym;
  auto intern = [&](const std::string& s) {
    auto it = id.find(s);
    if (it != id.end()) return it->second;
    const int32_t k = static_cast<int32_t>(sym.size());
    sym.push_back(s);
    id.emplace(s, k);
    return k;
  };
  std::vector<std::string> learned;
  for (const auto& [ch, f] : chars) {
    for (const std::string& s : {ch, "##" + ch}) {
      if (!id.count(s)) learned.push_back(s);
      intern(s);
    }
  }
  // Words as symbol sequences; words with a character outside the alphabet are left out.
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int64_t> freq;
  for (const auto& [w, c] : words) {
    std::vector<int32_t> s;
    bool ok = true;
    const auto cs = utf8_chars(w);
    for (size_t i = 0; i < cs.size() && ok; ++i) {
      auto it = id.find(i == 0 ? cs[i] : "##" + cs[i]);
      ok = it != id.end();
      if (ok) s.push_back(it->second);
    }
    if (ok && s.size() >= 1) {
      seqs.push_back(std::move(s));
      freq.push_back(c);
    }
  }
  // Pair statistics with the words each pair occurs in.
  std::unordered_map<Pair, int64_t, PairHash> pair_count;
  std::unordered_map<Pair, std::set<int32_t>, PairHash> where;
  for (size_t w = 0; w < seqs.size(); ++w)
    for (size_t i = 0; i + 1 < seqs[w].size(); ++i) {
      const Pair p{seqs[w][i], seqs[w][i + 1]};
      pair_count[p] += freq[w];
      where[p].insert(static_cast<int32_t>(w));
    }
  // Max-heap by (count, then smaller left/right strings first); stale entries skipped on pop.
  struct Entry {
    int64_t count;
    Pair pair;
  };
  auto worse = [&](const Entry& a, const Entry& b) {
    if (a.count != b.count) return a.count < b.count;
    const auto& al = sym[static_cast<size_t>(a.pair.first)];
    const auto& bl = sym[static_cast<size_t>(b.pair.first)];
    if (al != bl) return al > bl;
    return sym[static_cast<size_t>(a.pair.second)] > sym[static_cast<size_t>(b.pair.second)];
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(worse)> heap(worse);
  for (const auto& [p, c] : pair_count) heap.push({c, p});

  const int64_t room = o.vocab_size - static_cast<int64_t>(vocab.size());
  while (static_cast<int64_t>(learned.size()) < room && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    auto pc = pair_count.find(top.pair);
    if (pc == pair_count.end() || pc->second != top.count) continue;  // stale
    if (top.count < o.min_frequency) break;
    const std::string& right = sym[static_cast<size_t>(top.pair.second)];
    const std::string merged =
        sym[static_cast<size_t>(top.pair.first)] + (right.compare(0, 2, "##") == 0 ? right.substr(2) : right);
    const bool is_new = !id.count(merged);
    const int32_t m = intern(merged);
    if (is_new) learned.push_back(merged);
    const std::set<int32_t> affected = where[top.pair];
    std::unordered_map<Pair, int64_t, PairHash> delta;
    for (int32_t w : affected) {
      auto& s = seqs[static_cast<size_t>(w)];
      const int64_t f = freq[static_cast<size_t>(w)];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const Pair p{s[i], s[i + 1]};
        delta[p] -= f;
        auto wit = where.find(p);
        if (wit != where.end()) wit->second.erase(w);
      }
      std::vector<int32_t> ns;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == top.pair.first && s[i + 1] == top.pair.second) {
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
        where[p].insert(w);
      }
    }
    for (const auto& [p, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_count[p];
      c += d;
      if (c > 0) heap.push({c, p});
    }
  }
  for (auto& s : learned) vocab.push_back(std::move(s));
  if (static_cast<int64_t>(vocab.size()) > o.vocab_size) vocab.resize(static_cast<size_t>(o.vocab_size));
  return vocab;
}

}  // namespace bertcc
