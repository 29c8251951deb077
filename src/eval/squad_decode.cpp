// SQuAD answer decoding (Google's run_squad.py write_predictions and get_final_text).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "bertcc/error.h"
#include "bertcc/pyrandom.h"
#include "bertcc/squad.h"
#include "bertcc/utf8.h"

namespace bertcc {
namespace {

std::u32string to_u32(const std::string& s) {
  std::u32string r;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    bool bad = false;
    r.push_back(decode_utf8(p, s.size(), i, bad));
  }
  return r;
}
std::string to_u8(const std::u32string& s) {
  std::string r;
  for (char32_t c : s) append_utf8(r, c);
  return r;
}

// Drops the spaces; map[k] = index in `text` of the k-th kept character.
std::u32string strip_spaces(const std::u32string& text, std::vector<size_t>& map) {
  std::u32string r;
  map.clear();
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == U' ') continue;
    map.push_back(i);
    r.push_back(text[i]);
  }
  return r;
}

// Top-n indices by value, descending, stable for ties (Python's sorted(..., reverse=True)).
std::vector<int> best_indexes(const float* v, int n, int top) {
  std::vector<int> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  if (static_cast<int>(idx.size()) > top) idx.resize(static_cast<size_t>(top));
  return idx;
}

}  // namespace

std::string get_final_text(const BertTokenizer& tok, const std::string& pred_text, const std::string& orig_text) {
  std::vector<std::string> words;
  tok.basic_tokenize(orig_text, words);
  std::string tok_text8;
  for (size_t i = 0; i < words.size(); ++i) tok_text8 += (i ? " " : "") + words[i];
  const std::u32string tok_text = to_u32(tok_text8), pred = to_u32(pred_text), orig = to_u32(orig_text);
  const size_t start = tok_text.find(pred);
  if (start == std::u32string::npos || pred.empty()) return orig_text;
  const size_t end = start + pred.size() - 1;
  std::vector<size_t> orig_map, tok_map;
  const std::u32string orig_ns = strip_spaces(orig, orig_map), tok_ns = strip_spaces(tok_text, tok_map);
  if (orig_ns.size() != tok_ns.size()) return orig_text;
  // tok_s_to_ns: position in tok_text -> position without spaces
  auto s_to_ns = [&](size_t s) -> long {
    auto it = std::lower_bound(tok_map.begin(), tok_map.end(), s);
    return it != tok_map.end() && *it == s ? static_cast<long>(it - tok_map.begin()) : -1;
  };
  const long ns_start = s_to_ns(start), ns_end = s_to_ns(end);
  if (ns_start < 0 || ns_end < 0) return orig_text;
  const size_t os = orig_map[static_cast<size_t>(ns_start)], oe = orig_map[static_cast<size_t>(ns_end)];
  return to_u8(orig.substr(os, oe - os + 1));
}

namespace {

struct Prelim {
  size_t feature;
  int start, end;
  float start_logit, end_logit;
};
struct Nbest {
  std::string text;
  float start_logit, end_logit;
  int64_t byte_begin;
};
// SQuAD 2.0: the lowest null score over an example's windows, and where it came from
struct NullScore {
  float score = 1e6f, start = 0, end = 0;
  size_t feature = 0;
};

// The joint head's beams of window fi: its candidate spans (and the answer-class logit as the null score)
void joint_candidates(const SquadWindow& f, size_t fi, int ntok, const std::vector<float>& lg,
                      const SquadDecodeOptions& o, NullScore& null, std::vector<Prelim>& prelim) {
  const size_t K1 = static_cast<size_t>(o.start_n_top), K2 = static_cast<size_t>(o.end_n_top);
  BERTCC_CHECK(lg.size() == 2 * K1 + 2 * K1 * K2 + 1, "squad_decode: feature ", fi, " has ", lg.size(),
               " beam values, expected ", 2 * K1 + 2 * K1 * K2 + 1);
  if (o.v2 && lg.back() < null.score) {
    null.score = lg.back();
    null.feature = fi;
  }
  for (size_t i = 0; i < K1; ++i)
    for (size_t j = 0; j < K2; ++j) {
      const int s = static_cast<int>(lg[K1 + i]), t = static_cast<int>(lg[2 * K1 + K1 * K2 + i * K2 + j]);
      if (s >= ntok || t >= ntok) continue;
      if (f.token_to_orig[static_cast<size_t>(s)] < 0 || f.token_to_orig[static_cast<size_t>(t)] < 0) continue;
      if (!f.max_context[static_cast<size_t>(s)]) continue;
      if (t < s || t - s + 1 > o.max_answer_length) continue;
      prelim.push_back({fi, s, t, lg[i], lg[2 * K1 + i * K2 + j]});
    }
}

// The start/end logits of window fi: the n best starts by the n best ends that make an answer
void span_candidates(const SquadWindow& f, size_t fi, int ntok, const std::vector<float>& lg,
                     const SquadDecodeOptions& o, NullScore& null, std::vector<Prelim>& prelim) {
  BERTCC_CHECK(lg.size() >= static_cast<size_t>(2 * ntok), "squad_decode: feature ", fi, " has too few logits");
  std::vector<float> sl(static_cast<size_t>(ntok)), el(static_cast<size_t>(ntok));
  for (int t = 0; t < ntok; ++t) {
    sl[static_cast<size_t>(t)] = lg[2 * static_cast<size_t>(t)];
    el[static_cast<size_t>(t)] = lg[2 * static_cast<size_t>(t) + 1];
  }
  if (o.v2) {
    const float null_score = sl[0] + el[0];
    if (null_score < null.score) {
      null.score = null_score;
      null.feature = fi;
      null.start = sl[0];
      null.end = el[0];
    }
  }
  const auto si = best_indexes(sl.data(), ntok, o.n_best_size), ei2 = best_indexes(el.data(), ntok, o.n_best_size);
  for (int s : si)
    for (int t : ei2) {
      if (f.token_to_orig[static_cast<size_t>(s)] < 0 || f.token_to_orig[static_cast<size_t>(t)] < 0) continue;
      if (!f.max_context[static_cast<size_t>(s)]) continue;
      if (t < s || t - s + 1 > o.max_answer_length) continue;
      prelim.push_back({fi, s, t, sl[static_cast<size_t>(s)], el[static_cast<size_t>(t)]});
    }
}

// A candidate's text in the original context (Google's get_final_text) and its byte offset there
std::string answer_text(const BertTokenizer& tok, const SquadExample& e, const SquadFeatures& feats, const Prelim& p,
                        int64_t* byte_begin) {
  const SquadWindow& f = feats.windows[p.feature];
  const std::vector<int32_t>& ids = feats.inputs[p.feature].input_ids;
  std::string tt;
  for (int k = p.start; k <= p.end; ++k) {
    if (k > p.start) tt += ' ';
    tt += tok.vocab().token(ids[static_cast<size_t>(k)]);
  }
  for (size_t q; (q = tt.find(" ##")) != std::string::npos;) tt.erase(q, 3);
  for (size_t q; (q = tt.find("##")) != std::string::npos;) tt.erase(q, 2);
  const std::string clean = py_join_split(tt);  // " ".join(tok_text.strip().split())
  const int ow0 = f.token_to_orig[static_cast<size_t>(p.start)], ow1 = f.token_to_orig[static_cast<size_t>(p.end)];
  std::string orig;
  for (int w = ow0; w <= ow1; ++w) orig += (w > ow0 ? " " : "") + e.doc_tokens[static_cast<size_t>(w)];
  const std::string text = get_final_text(tok, clean, orig);
  const size_t b = e.context.find(text, e.word_byte_begin[static_cast<size_t>(ow0)]);
  *byte_begin = b == std::string::npos ? static_cast<int64_t>(e.word_byte_begin[static_cast<size_t>(ow0)])
                                       : static_cast<int64_t>(b);
  return text;
}

// The n best distinct answers from the candidates, best first (with the null answer in SQuAD 2.0)
std::vector<Nbest> best_answers(const BertTokenizer& tok, const SquadExample& e, const SquadFeatures& feats,
                                std::vector<Prelim>& prelim, const NullScore& null, const SquadDecodeOptions& o) {
  const bool joint = o.start_n_top > 0;
  if (o.v2 && !joint) prelim.push_back({null.feature, 0, 0, null.start, null.end});
  std::stable_sort(prelim.begin(), prelim.end(), [](const Prelim& a, const Prelim& b) {
    return a.start_logit + a.end_logit > b.start_logit + b.end_logit;
  });
  std::set<std::string> seen;
  std::vector<Nbest> nbest;
  for (const Prelim& p : prelim) {
    if (static_cast<int>(nbest.size()) >= o.n_best_size) break;
    std::string text;
    int64_t byte_begin = -1;
    if (p.start > 0) {
      text = answer_text(tok, e, feats, p, &byte_begin);
      if (seen.count(text)) continue;
      seen.insert(text);
    } else {
      seen.insert("");
    }
    nbest.push_back({text, p.start_logit, p.end_logit, byte_begin});
  }
  if (o.v2 && !joint && !seen.count("")) nbest.push_back({"", null.start, null.end, -1});
  if (nbest.empty()) nbest.push_back({"empty", 0.0f, 0.0f, -1});
  return nbest;
}

// Example ei's n-best list with probabilities, its prediction and (SQuAD 2.0) its null odds
void record_answer(const SquadExample& e, size_t ei, const std::vector<Nbest>& nbest, float score_null,
                   const SquadDecodeOptions& o, SquadOutput& out) {
  const bool joint = o.start_n_top > 0;
  double mx = -INFINITY;
  for (const auto& n : nbest) mx = std::max(mx, static_cast<double>(n.start_logit + n.end_logit));
  std::vector<double> probs;
  double z = 0;
  for (const auto& n : nbest) {
    probs.push_back(std::exp(static_cast<double>(n.start_logit + n.end_logit) - mx));
    z += probs.back();
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  const Nbest* best_non_null = nullptr;
  for (size_t i = 0; i < nbest.size(); ++i) {
    if (!best_non_null && !nbest[i].text.empty()) best_non_null = &nbest[i];
    list.push_back({{"text", nbest[i].text},
                    {"probability", probs[i] / z},
                    {"start_logit", nbest[i].start_logit},
                    {"end_logit", nbest[i].end_logit}});
  }
  out.nbest[e.id] = list;
  if (!o.v2) {
    out.predictions[e.id] = nbest[0].text;
    out.answer_byte_begin[ei] = nbest[0].byte_begin;
    return;
  }
  // joint head: the answer-class logit itself (NVIDIA's score_diff = null score)
  const double diff = !best_non_null ? INFINITY
                      : joint        ? static_cast<double>(score_null)
                              : static_cast<double>(score_null) - best_non_null->start_logit - best_non_null->end_logit;
  out.null_odds[e.id] = std::isfinite(diff) ? diff : 1e30;
  if (diff > o.null_score_diff_threshold) {
    out.predictions[e.id] = "";
  } else {
    out.predictions[e.id] = best_non_null->text;
    out.answer_byte_begin[ei] = best_non_null->byte_begin;
  }
}

}  // namespace

SquadOutput squad_decode(const BertTokenizer& tok, const std::vector<SquadExample>& ex, const SquadFeatures& feats,
                         const std::vector<std::vector<float>>& logits, const SquadDecodeOptions& o) {
  const size_t nwin = feats.windows.size();
  BERTCC_CHECK(feats.inputs.size() == nwin && logits.size() == nwin, "squad_decode: ", logits.size(), " results for ",
               nwin, " windows");
  std::vector<std::vector<size_t>> by_example(ex.size());
  for (size_t i = 0; i < nwin; ++i) by_example[feats.windows[i].example].push_back(i);
  SquadOutput out;
  out.predictions = nlohmann::ordered_json::object();
  out.nbest = nlohmann::ordered_json::object();
  out.null_odds = nlohmann::ordered_json::object();
  out.answer_byte_begin.assign(ex.size(), -1);
  for (size_t ei = 0; ei < ex.size(); ++ei) {
    std::vector<Prelim> prelim;
    NullScore null;
    for (size_t fi : by_example[ei]) {
      const int ntok = static_cast<int>(feats.inputs[fi].input_ids.size());
      if (o.start_n_top > 0)
        joint_candidates(feats.windows[fi], fi, ntok, logits[fi], o, null, prelim);
      else
        span_candidates(feats.windows[fi], fi, ntok, logits[fi], o, null, prelim);
    }
    const std::vector<Nbest> nbest = best_answers(tok, ex[ei], feats, prelim, null, o);
    record_answer(ex[ei], ei, nbest, null.score, o, out);
  }
  return out;
}

}  // namespace bertcc
