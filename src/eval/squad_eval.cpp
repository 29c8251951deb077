#include "bertcc/squad_eval.h"

#include <utf8proc.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/pyrandom.h"
#include "bertcc/utf8.h"

namespace bertcc {
namespace {

bool is_ascii_punct(uint32_t c) {  // Python's string.punctuation
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

bool is_word(uint32_t c) {  // Python re's \w on str: alphanumeric (L*, N*) or underscore
  if (c == '_') return true;
  const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> out;
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    bool invalid;
    out.push_back(decode_utf8(b, s.size(), i, invalid));
  }
  return out;
}

std::vector<std::string> tokens(const std::string& s) {  // normalize_answer(s).split()
  const std::string n = squad_normalize(s);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < n.size()) {
    while (i < n.size() && n[i] == ' ') ++i;
    const size_t st = i;
    while (i < n.size() && n[i] != ' ') ++i;
    if (i > st) out.push_back(n.substr(st, i - st));
  }
  return out;
}

double f1_score(const std::vector<std::string>& pred, const std::vector<std::string>& gold) {
  std::map<std::string, int> cp, cg;
  for (const auto& t : pred) ++cp[t];
  for (const auto& t : gold) ++cg[t];
  int same = 0;
  for (const auto& [t, c] : cp) {
    auto it = cg.find(t);
    if (it != cg.end()) same += std::min(c, it->second);
  }
  if (same == 0) return 0.0;
  const double p = static_cast<double>(same) / static_cast<double>(pred.size());
  const double r = static_cast<double>(same) / static_cast<double>(gold.size());
  return 2 * p * r / (p + r);
}

nlohmann::ordered_json load_json(const std::string& path) {
  try {
    return nlohmann::ordered_json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
}

}  // namespace

std::string squad_normalize(const std::string& s) {
  // lower() and punctuation removal
  std::vector<uint32_t> cps;
  for (uint32_t c : decode(s)) {
    if (is_ascii_punct(c)) continue;
    if (c == 0x130) {  // Python's full lowercase of U+0130
      cps.push_back('i');
      cps.push_back(0x307);
      continue;
    }
    cps.push_back(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  // \b(a|an|the)\b -> ' ' : whole runs of word characters equal to an article
  std::vector<uint32_t> art;
  for (size_t i = 0; i < cps.size();) {
    if (!is_word(cps[i])) {
      art.push_back(cps[i++]);
      continue;
    }
    size_t j = i;
    while (j < cps.size() && is_word(cps[j])) ++j;
    const size_t n = j - i;
    const bool article = (n == 1 && cps[i] == 'a') || (n == 2 && cps[i] == 'a' && cps[i + 1] == 'n') ||
                         (n == 3 && cps[i] == 't' && cps[i + 1] == 'h' && cps[i + 2] == 'e');
    if (article)
      art.push_back(' ');
    else
      art.insert(art.end(), cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j));
    i = j;
  }
  std::string text;
  for (uint32_t c : art) append_utf8(text, c);
  return py_join_split(text);  // ' '.join(text.split())
}

namespace {

using Scores = std::unordered_map<std::string, double>;

// evaluate-v1.1.py: a missing prediction counts as 0
nlohmann::ordered_json evaluate_v1(const nlohmann::ordered_json& data, const std::string& data_path,
                                   const std::unordered_map<std::string, std::string>& preds) {
  double em = 0, f1 = 0;
  int64_t total = 0;
  for (const auto& a : data["data"])
    for (const auto& p : a["paragraphs"])
      for (const auto& qa : p["qas"]) {
        ++total;
        auto it = preds.find(qa["id"].get<std::string>());
        if (it == preds.end()) continue;
        const std::string np = squad_normalize(it->second);
        const auto pt = tokens(it->second);
        double best_em = 0, best_f1 = 0;
        for (const auto& g : qa["answers"]) {
          const std::string gt = g["text"].get<std::string>();
          best_em = std::max(best_em, np == squad_normalize(gt) ? 1.0 : 0.0);
          best_f1 = std::max(best_f1, f1_score(pt, tokens(gt)));
        }
        em += best_em;
        f1 += best_f1;
      }
  BERTCC_CHECK(total > 0, data_path, ": no questions");
  nlohmann::ordered_json r;
  r["exact_match"] = 100.0 * em / static_cast<double>(total);
  r["f1"] = 100.0 * f1 / static_cast<double>(total);
  return r;
}

// evaluate-v2.0.py's raw scores: each predicted question's exact match and F1 against its gold
// answers (the empty answer for unanswerable ones), in dataset order
struct RawScores {
  std::vector<std::string> qids;  // dataset order
  std::unordered_map<std::string, bool> has_ans;
  Scores exact, f1;
};
RawScores raw_scores_v2(const nlohmann::ordered_json& data, const std::unordered_map<std::string, std::string>& preds) {
  RawScores r;
  for (const auto& a : data["data"])
    for (const auto& p : a["paragraphs"])
      for (const auto& qa : p["qas"]) {
        const std::string id = qa["id"].get<std::string>();
        r.has_ans[id] = !qa["answers"].empty();
        std::vector<std::string> gold;
        for (const auto& g : qa["answers"])
          if (!squad_normalize(g["text"].get<std::string>()).empty()) gold.push_back(g["text"].get<std::string>());
        if (gold.empty()) gold.push_back("");
        auto it = preds.find(id);
        if (it == preds.end()) continue;  // the official script skips (and reports) it
        r.qids.push_back(id);
        const auto pt = it->second.empty() ? std::vector<std::string>{} : tokens(it->second);
        double e = 0, f = 0;
        for (const auto& g : gold) {
          const auto gt = g.empty() ? std::vector<std::string>{} : tokens(g);
          e = std::max(e, squad_normalize(g) == squad_normalize(it->second) ? 1.0 : 0.0);
          f = std::max(f, (gt.empty() || pt.empty()) ? static_cast<double>(gt == pt) : f1_score(pt, gt));
        }
        r.exact[id] = e;
        r.f1[id] = f;
      }
  return r;
}

// find_all_best_thresh, on the raw scores: the best exact and F1 over null-odds thresholds
void best_thresholds(const nlohmann::ordered_json& na_j, Scores& na, RawScores& raw,
                     std::unordered_map<std::string, std::string>& preds, nlohmann::ordered_json& r) {
  std::vector<std::string> order;
  for (auto it = na_j.begin(); it != na_j.end(); ++it) order.push_back(it.key());
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return na[a] < na[b]; });
  int64_t num_no_ans = 0;
  for (const auto& [id, h] : raw.has_ans) num_no_ans += !h;
  auto best = [&](const Scores& scores) {
    double cur = static_cast<double>(num_no_ans), best_score = cur, best_t = 0.0;
    for (const auto& id : order) {
      if (!scores.count(id)) continue;
      const double diff = raw.has_ans[id] ? scores.at(id) : (preds[id].empty() ? 0.0 : -1.0);
      cur += diff;
      if (cur > best_score) {
        best_score = cur;
        best_t = na[id];
      }
    }
    return std::pair<double, double>{100.0 * best_score / static_cast<double>(scores.size()), best_t};
  };
  const auto [be, bet] = best(raw.exact);
  const auto [bf, bft] = best(raw.f1);
  r["best_exact"] = be;
  r["best_exact_thresh"] = bet;
  r["best_f1"] = bf;
  r["best_f1_thresh"] = bft;
}

// evaluate-v2.0.py
nlohmann::ordered_json evaluate_v2(const nlohmann::ordered_json& data, const std::string& data_path,
                                   const std::string& pred_path, std::unordered_map<std::string, std::string>& preds,
                                   const std::string& na_path, double na_thresh) {
  RawScores raw = raw_scores_v2(data, preds);
  auto& has_ans = raw.has_ans;
  BERTCC_CHECK(!raw.qids.empty(), pred_path, ": no predictions for the questions of ", data_path);
  nlohmann::ordered_json na_j;
  Scores na;
  if (!na_path.empty()) {
    na_j = load_json(na_path);
    for (auto it = na_j.begin(); it != na_j.end(); ++it) na[it.key()] = it->get<double>();
  }
  auto thresholded = [&](const Scores& scores) {
    Scores out;
    for (const auto& [id, sc] : scores) {
      const double p = na.count(id) ? na[id] : 0.0;
      out[id] = p > na_thresh ? static_cast<double>(!has_ans[id]) : sc;
    }
    return out;
  };
  const auto ex = thresholded(raw.exact), fs = thresholded(raw.f1);
  auto mean = [&](const Scores& m, bool filter, bool want) {
    double s = 0;
    int64_t n = 0;
    for (const auto& id : raw.qids) {
      if (filter && has_ans[id] != want) continue;
      s += m.at(id);
      ++n;
    }
    return std::pair<double, int64_t>{n ? 100.0 * s / static_cast<double>(n) : 0.0, n};
  };
  nlohmann::ordered_json r;
  r["exact"] = mean(ex, false, false).first;
  r["f1"] = mean(fs, false, false).first;
  r["total"] = static_cast<int64_t>(raw.qids.size());
  const auto he = mean(ex, true, true), hf = mean(fs, true, true), ne = mean(ex, true, false),
             nf = mean(fs, true, false);
  if (he.second) {
    r["HasAns_exact"] = he.first;
    r["HasAns_f1"] = hf.first;
    r["HasAns_total"] = he.second;
  }
  if (ne.second) {
    r["NoAns_exact"] = ne.first;
    r["NoAns_f1"] = nf.first;
    r["NoAns_total"] = ne.second;
  }
  if (!na_path.empty()) best_thresholds(na_j, na, raw, preds, r);
  return r;
}

}  // namespace

nlohmann::ordered_json evaluate_squad(const std::string& data_path, const std::string& pred_path,
                                      const std::string& na_path, double na_thresh) {
  const auto data = load_json(data_path);
  const auto preds_j = load_json(pred_path);
  BERTCC_CHECK(data.contains("data") && data["data"].is_array(), data_path, ": no 'data' array (not a SQuAD file)");
  BERTCC_CHECK(preds_j.is_object(), pred_path, ": predictions must be a JSON object {question id: answer}");
  std::unordered_map<std::string, std::string> preds;
  for (auto it = preds_j.begin(); it != preds_j.end(); ++it) {
    BERTCC_CHECK(it->is_string(), pred_path, ": prediction for '", it.key(), "' is not a string");
    preds[it.key()] = it->get<std::string>();
  }
  bool v2 = data.value("version", "") == "v2.0";
  for (const auto& a : data["data"])
    for (const auto& p : a["paragraphs"])
      for (const auto& qa : p["qas"]) v2 = v2 || qa.contains("is_impossible");
  if (!v2) return evaluate_v1(data, data_path, preds);
  return evaluate_v2(data, data_path, pred_path, preds, na_path, na_thresh);
}

}  // namespace bertcc
