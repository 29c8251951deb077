#include "bertcc/create_pretraining.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string_view>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/utf8.h"

namespace bertcc {
namespace {

// Empty after Python's str.strip(), with invalid UTF-8 ignored (convert_to_unicode(errors="ignore")).
bool py_blank(std::string_view line) {
  const auto* s = reinterpret_cast<const unsigned char*>(line.data());
  for (size_t i = 0; i < line.size();) {
    bool invalid;
    const uint32_t c = decode_utf8(s, line.size(), i, invalid);
    if (!invalid && !py_isspace(c)) return false;
  }
  return true;
}

// Google's truncate_seq_pair: while the pair is too long, drop a token from the front or the back
// (one random draw each) of the longer segment (b on a tie). The kept ranges [lo, hi) move by
// index and are copied once at the end: erasing the front one token at a time was quadratic (a
// line of 400k words took 4 s, one of 45 MB did not finish in minutes). Same draws, same result.
void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_tokens, PyRandom& rng) {
  size_t a_lo = 0, a_hi = a.size(), b_lo = 0, b_hi = b.size();
  while ((a_hi - a_lo) + (b_hi - b_lo) > max_tokens) {
    const bool in_a = a_hi - a_lo > b_hi - b_lo;
    size_t& lo = in_a ? a_lo : b_lo;
    size_t& hi = in_a ? a_hi : b_hi;
    if (rng.random() < 0.5)
      ++lo;
    else
      --hi;
  }
  auto keep = [](std::vector<int32_t>& t, size_t lo, size_t hi) {
    t.resize(hi);
    t.erase(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(lo));  // one move, not one per token
  };
  keep(a, a_lo, a_hi);
  keep(b, b_lo, b_hi);
}

void mask_tokens(TrainingInstance& inst, const Vocab& vocab, const PretrainingDataOptions& o, PyRandom& rng,
                 int32_t cls, int32_t sep, int32_t mask) {
  std::vector<std::vector<int32_t>> cand;
  const auto& tokens = inst.tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] == cls || tokens[i] == sep) continue;
    const std::string& t = vocab.token(tokens[i]);
    if (o.whole_word_mask && !cand.empty() && t.size() >= 2 && t[0] == '#' && t[1] == '#')
      cand.back().push_back(static_cast<int32_t>(i));
    else
      cand.push_back({static_cast<int32_t>(i)});
  }
  rng.shuffle(cand);
  std::vector<int32_t> out = tokens;
  const int64_t num_to_predict =
      std::min<int64_t>(o.max_predictions_per_seq,
                        std::max<int64_t>(1, round_half_even(static_cast<double>(tokens.size()) * o.masked_lm_prob)));
  std::vector<std::pair<int32_t, int32_t>> lms;  // (index, label)
  std::vector<char> covered(tokens.size(), 0);
  for (const auto& set : cand) {
    if (static_cast<int64_t>(lms.size()) >= num_to_predict) break;
    if (static_cast<int64_t>(lms.size() + set.size()) > num_to_predict) continue;
    bool any = false;
    for (int32_t i : set) any = any || covered[static_cast<size_t>(i)];
    if (any) continue;
    for (int32_t i : set) {
      covered[static_cast<size_t>(i)] = 1;
      int32_t m;
      if (rng.random() < 0.8)
        m = mask;
      else if (rng.random() < 0.5)
        m = tokens[static_cast<size_t>(i)];
      else
        m = static_cast<int32_t>(rng.randint(0, vocab.size() - 1));
      out[static_cast<size_t>(i)] = m;
      lms.emplace_back(i, tokens[static_cast<size_t>(i)]);
    }
  }
  std::sort(lms.begin(), lms.end());
  inst.tokens = std::move(out);
  for (const auto& [i, l] : lms) {
    inst.masked_positions.push_back(i);
    inst.masked_labels.push_back(l);
  }
}

void instances_from_document(const std::vector<Document>& docs, size_t di, const Vocab& vocab,
                             const PretrainingDataOptions& o, PyRandom& rng, std::vector<TrainingInstance>& out,
                             int32_t cls, int32_t sep, int32_t mask) {
  const Document& doc = docs[di];
  const int64_t max_num_tokens = o.max_seq_length - 3;
  int64_t target = max_num_tokens;
  if (rng.random() < o.short_seq_prob) target = rng.randint(2, max_num_tokens);
  std::vector<const std::vector<int32_t>*> chunk;
  int64_t cur_len = 0;
  int64_t i = 0;
  const int64_t n = static_cast<int64_t>(doc.size());
  while (i < n) {
    chunk.push_back(&doc[static_cast<size_t>(i)]);
    cur_len += static_cast<int64_t>(doc[static_cast<size_t>(i)].size());
    if (i == n - 1 || cur_len >= target) {
      if (!chunk.empty()) {
        int64_t a_end = 1;
        if (chunk.size() >= 2) a_end = rng.randint(1, static_cast<int64_t>(chunk.size()) - 1);
        std::vector<int32_t> a, b;
        for (int64_t j = 0; j < a_end; ++j) a.insert(a.end(), chunk[j]->begin(), chunk[j]->end());
        bool random_next = false;
        if (chunk.size() == 1 || rng.random() < 0.5) {
          random_next = true;
          const int64_t target_b = target - static_cast<int64_t>(a.size());
          size_t rdi = 0;
          for (int k = 0; k < 10; ++k) {
            rdi = static_cast<size_t>(rng.randint(0, static_cast<int64_t>(docs.size()) - 1));
            if (rdi != di) break;
          }
          const Document& rd = docs[rdi];
          const int64_t start = rng.randint(0, static_cast<int64_t>(rd.size()) - 1);
          for (int64_t j = start; j < static_cast<int64_t>(rd.size()); ++j) {
            b.insert(b.end(), rd[static_cast<size_t>(j)].begin(), rd[static_cast<size_t>(j)].end());
            if (static_cast<int64_t>(b.size()) >= target_b) break;
          }
          i -= static_cast<int64_t>(chunk.size()) - a_end;  // put the unused segments back
        } else {
          for (size_t j = static_cast<size_t>(a_end); j < chunk.size(); ++j)
            b.insert(b.end(), chunk[j]->begin(), chunk[j]->end());
        }
        truncate_seq_pair(a, b, static_cast<size_t>(max_num_tokens), rng);
        BERTCC_CHECK(!a.empty() && !b.empty(), "create-pretraining-data: empty segment (document ", di, ")");
        TrainingInstance inst;
        inst.tokens.push_back(cls);
        inst.tokens.insert(inst.tokens.end(), a.begin(), a.end());
        inst.tokens.push_back(sep);
        inst.segment_ids.assign(inst.tokens.size(), 0);
        inst.tokens.insert(inst.tokens.end(), b.begin(), b.end());
        inst.tokens.push_back(sep);
        inst.segment_ids.resize(inst.tokens.size(), 1);
        inst.is_random_next = random_next;
        if (!o.dynamic_masking) mask_tokens(inst, vocab, o, rng, cls, sep, mask);
        out.push_back(std::move(inst));
      }
      chunk.clear();
      cur_len = 0;
    }
    ++i;
  }
}

}  // namespace

void read_documents(const std::string& path, const BertTokenizer& tok, std::vector<Document>& docs,
                    TokenizeStats* stats) {
  std::ifstream in;
  open_text_input(in, path);
  // Google starts with [[]] and keeps appending across files (a file not ending in a blank line
  // continues its last document into the next file).
  if (docs.empty()) docs.emplace_back();
  std::string raw;
  std::vector<int32_t> ids;
  auto handle = [&](std::string_view line) {
    if (py_blank(line)) {
      docs.emplace_back();
      return;
    }
    ids.clear();
    tok.encode(line, ids, stats);
    if (!ids.empty()) docs.back().push_back(ids);
  };
  for (bool first = true; std::getline(in, raw); first = false) {
    if (first) strip_text_bom(raw, path);  // UTF-8 BOM skipped, UTF-16 refused
    // Python's universal newlines: "\r\n", "\r" and "\n" all end a line.
    std::string_view rest(raw);
    if (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
    size_t cr;
    while ((cr = rest.find('\r')) != std::string_view::npos) {
      handle(rest.substr(0, cr));
      rest.remove_prefix(cr + 1);
    }
    handle(rest);
  }
  BERTCC_CHECK(!in.bad(), path, ": read error");
}

std::vector<TrainingInstance> create_training_instances(std::vector<Document> docs, const Vocab& vocab,
                                                        const PretrainingDataOptions& o, PyRandom& rng) {
  BERTCC_CHECK(o.max_seq_length >= 5, "--max-seq-length must be at least 5");
  BERTCC_CHECK(o.masked_lm_prob > 0 && o.masked_lm_prob < 1, "--masked-lm-prob must be in (0, 1)");
  const int32_t cls = vocab.id("[CLS]"), sep = vocab.id("[SEP]"), mask = vocab.id("[MASK]");
  BERTCC_CHECK(cls >= 0 && sep >= 0 && mask >= 0, vocab.source(),
               ": the vocabulary lacks [CLS], [SEP] or [MASK], which pre-training data needs");
  docs.erase(std::remove_if(docs.begin(), docs.end(), [](const Document& d) { return d.empty(); }), docs.end());
  rng.shuffle(docs);
  std::vector<TrainingInstance> inst;
  if (docs.empty()) return inst;
  for (int64_t d = 0; d < o.dupe_factor; ++d)
    for (size_t di = 0; di < docs.size(); ++di) instances_from_document(docs, di, vocab, o, rng, inst, cls, sep, mask);
  rng.shuffle(inst);
  return inst;
}

PretrainShard instances_to_shard(const std::vector<TrainingInstance>& inst, const PretrainingDataOptions& o) {
  PretrainShard s;
  s.N = static_cast<int64_t>(inst.size());
  s.S = o.max_seq_length;
  s.P = o.max_predictions_per_seq;
  const size_t S = static_cast<size_t>(s.S), P = static_cast<size_t>(s.P);
  s.input_ids.assign(inst.size() * S, 0);
  s.input_mask.assign(inst.size() * S, 0);
  s.segment_ids.assign(inst.size() * S, 0);
  s.masked_lm_positions.assign(inst.size() * P, 0);
  s.masked_lm_ids.assign(inst.size() * P, 0);
  s.next_sentence_labels.assign(inst.size(), 0);
  for (size_t r = 0; r < inst.size(); ++r) {
    const auto& t = inst[r];
    for (size_t j = 0; j < t.tokens.size(); ++j) {
      s.input_ids[r * S + j] = t.tokens[j];
      s.input_mask[r * S + j] = 1;
      s.segment_ids[r * S + j] = t.segment_ids[j];
    }
    for (size_t j = 0; j < t.masked_positions.size(); ++j) {
      s.masked_lm_positions[r * P + j] = t.masked_positions[j];
      s.masked_lm_ids[r * P + j] = t.masked_labels[j];
    }
    s.next_sentence_labels[r] = t.is_random_next ? 1 : 0;
  }
  return s;
}

UnmaskedShard instances_to_unmasked_shard(const std::vector<TrainingInstance>& inst, const PretrainingDataOptions& o) {
  std::vector<int32_t> lengths;
  for (const auto& t : inst) lengths.push_back(static_cast<int32_t>(t.tokens.size()));
  return unmasked_from(instances_to_shard(inst, o), std::move(lengths));
}

}  // namespace bertcc
