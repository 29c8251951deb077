// Entity-level NER metrics with seqeval's default rules (conlleval-compatible chunking).
#include <algorithm>
#include <cstdio>
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

std::string ner_classification_report(const nlohmann::ordered_json& m, int digits) {
  BERTCC_CHECK(m.is_object() && m.contains("per_type") && (m["per_type"].is_object() || m["per_type"].is_null()),
               "classification report: the metrics have no per_type");
  // null: data without entities (every tag O): a table of the averages alone
  const nlohmann::ordered_json per = m["per_type"].is_null() ? nlohmann::ordered_json::object() : m["per_type"];
  size_t width = std::string("weighted avg").size();
  for (const auto& [t, v] : per.items()) width = std::max(width, t.size());
  width = std::max(width, static_cast<size_t>(digits));
  const int w = static_cast<int>(width);
  std::string out;
  char b[512];
  std::snprintf(b, sizeof b, "%*s  %9s %9s %9s %9s\n\n", w, "", "precision", "recall", "f1-score", "support");
  out += b;
  auto row = [&](const std::string& name, double p, double r, double f, int64_t n) {
    std::snprintf(b, sizeof b, "%*s  %9.*f %9.*f %9.*f %9lld\n", w, name.c_str(), digits, p, digits, r, digits, f,
                  static_cast<long long>(n));
    out += b;
  };
  double mp = 0, mr = 0, mf = 0, wp = 0, wr = 0, wf = 0;
  int64_t total = 0;
  for (const auto& [t, v] : per.items()) {
    const double p = v["precision"].get<double>(), r = v["recall"].get<double>(), f = v["f1"].get<double>();
    const int64_t n = v["support"].get<int64_t>();
    row(t, p, r, f, n);
    mp += p;
    mr += r;
    mf += f;
    wp += p * static_cast<double>(n);
    wr += r * static_cast<double>(n);
    wf += f * static_cast<double>(n);
    total += n;
  }
  out += "\n";
  const double k = static_cast<double>(std::max<size_t>(per.size(), 1)), nt = static_cast<double>(total);
  row("micro avg", m["precision"].get<double>(), m["recall"].get<double>(), m["f1"].get<double>(), total);
  row("macro avg", mp / k, mr / k, mf / k, total);
  row("weighted avg", divide(wp, nt), divide(wr, nt), divide(wf, nt), total);
  return out;
}

}  // namespace bertcc
