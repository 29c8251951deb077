// Entity-level NER metrics with seqeval's default rules (conlleval-compatible chunking).
#include <map>
#include <set>

#include "bertcc/error.h"
#include "bertcc/ner.h"

namespace bertcc {
namespace {
bool end_of_chunk(char pt, char t, const std::string& ptype, const std::string& type) {
  if (pt == 'E' || pt == 'S') return true;
  if ((pt == 'B' || pt == 'I') && (t == 'B' || t == 'S' || t == 'O')) return true;
  return pt != 'O' && pt != '.' && ptype != type;
}
bool start_of_chunk(char pt, char t, const std::string& ptype, const std::string& type) {
  if (t == 'B' || t == 'S') return true;
  if ((pt == 'E' || pt == 'S' || pt == 'O') && (t == 'E' || t == 'I')) return true;
  return t != 'O' && t != '.' && ptype != type;
}
// seqeval: tag = first character; type = what follows the first '-' after it ('_' if none).
std::string type_of(const std::string& chunk) {
  if (chunk.size() <= 1) return "_";
  const std::string rest = chunk.substr(1);
  const size_t d = rest.find('-');
  const std::string t = d == std::string::npos ? rest : rest.substr(d + 1);
  return t.empty() ? "_" : t;
}
double divide(double a, double b) { return b == 0 ? 0.0 : a / b; }
double f1_of(double p, double r) { return p + r == 0 ? 0.0 : 2 * p * r / (p + r); }
}  // namespace

std::vector<Entity> get_entities(const std::vector<std::vector<std::string>>& tags) {
  std::vector<std::string> seq;
  for (const auto& s : tags) {
    seq.insert(seq.end(), s.begin(), s.end());
    seq.push_back("O");
  }
  seq.push_back("O");
  char prev_tag = 'O';
  std::string prev_type;
  int64_t begin = 0;
  std::vector<Entity> out;
  for (size_t i = 0; i < seq.size(); ++i) {
    const char tag = seq[i].empty() ? 'O' : seq[i][0];
    const std::string type = type_of(seq[i]);
    if (end_of_chunk(prev_tag, tag, prev_type, type)) out.push_back({prev_type, begin, static_cast<int64_t>(i) - 1});
    if (start_of_chunk(prev_tag, tag, prev_type, type)) begin = static_cast<int64_t>(i);
    prev_tag = tag;
    prev_type = type;
  }
  return out;
}

nlohmann::ordered_json ner_metrics(const std::vector<std::vector<std::string>>& gold,
                                   const std::vector<std::vector<std::string>>& pred) {
  BERTCC_CHECK(gold.size() == pred.size(), "ner metrics: ", pred.size(), " predicted sentences for ", gold.size());
  int64_t tokens = 0, token_ok = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    BERTCC_CHECK(gold[i].size() == pred[i].size(), "ner metrics: sentence ", i + 1, " has ", pred[i].size(),
                 " predicted tags for ", gold[i].size(), " words");
    for (size_t j = 0; j < gold[i].size(); ++j) {
      ++tokens;
      token_ok += gold[i][j] == pred[i][j];
    }
  }
  const auto g = get_entities(gold), p = get_entities(pred);
  std::map<std::string, std::set<std::pair<int64_t, int64_t>>> gs, ps;
  for (const auto& e : g) gs[e.type].insert({e.begin, e.end});
  for (const auto& e : p) ps[e.type].insert({e.begin, e.end});
  std::set<std::string> types;
  for (auto& [t, v] : gs) types.insert(t);
  for (auto& [t, v] : ps) types.insert(t);
  double tp = 0, np = 0, nt = 0;
  nlohmann::ordered_json per;
  for (const auto& t : types) {
    double tpt = 0;
    for (const auto& s : ps[t]) tpt += gs[t].count(s);
    const double npt = static_cast<double>(ps[t].size()), ntt = static_cast<double>(gs[t].size());
    const double pr = divide(tpt, npt), rc = divide(tpt, ntt);
    per[t] = {{"precision", pr}, {"recall", rc}, {"f1", f1_of(pr, rc)}, {"support", gs[t].size()}};
    tp += tpt;
    np += npt;
    nt += ntt;
  }
  const double pr = divide(tp, np), rc = divide(tp, nt);
  nlohmann::ordered_json r;
  r["precision"] = pr;
  r["recall"] = rc;
  r["f1"] = f1_of(pr, rc);
  r["accuracy"] = divide(static_cast<double>(token_ok), static_cast<double>(tokens));
  r["entities"] = static_cast<int64_t>(nt);
  r["per_type"] = per;
  return r;
}

}  // namespace bertcc
