#include "bertcc/glue.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"

namespace bertcc {
namespace {

// Column indices as GLUE ships each task (and Hugging Face's processors read them). Labelled
// files (train, dev): text a, text b (-1: none), label (-1: the last column). Test files: text a,
// text b; every GLUE test file has a header row.
struct Layout {
  const char* name;
  bool header;  // labelled files have a header row (CoLA's have none)
  int a, b, label;
  int test_a, test_b;
};

Layout layout(std::string t) {
  for (auto& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "cola") return {"cola", false, 3, -1, 1, 1, -1};
  if (t == "sst-2" || t == "sst2") return {"sst-2", true, 0, -1, 1, 1, -1};
  if (t == "mrpc") return {"mrpc", true, 3, 4, 0, 3, 4};
  if (t == "sts-b" || t == "stsb") return {"sts-b", true, 7, 8, -1, 7, 8};
  if (t == "qqp") return {"qqp", true, 3, 4, 5, 1, 2};
  if (t == "mnli" || t == "mnli-mm") return {"mnli", true, 8, 9, -1, 8, 9};
  if (t == "qnli") return {"qnli", true, 1, 2, -1, 1, 2};
  if (t == "rte") return {"rte", true, 1, 2, -1, 1, 2};
  if (t == "wnli") return {"wnli", true, 1, 2, -1, 1, 2};
  fail("unknown GLUE task '", t, "' (cola, sst-2, mrpc, sts-b, qqp, mnli, mnli-mm, qnli, rte, wnli)");
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  size_t s = 0;
  for (;;) {
    const size_t t = line.find('\t', s);
    out.push_back(line.substr(s, t == std::string::npos ? std::string::npos : t - s));
    if (t == std::string::npos) return out;
    s = t + 1;
  }
}

}  // namespace

std::vector<GlueExample> read_glue(const std::string& task, const std::string& path, GlueSplit split) {
  const Layout L = layout(task);
  const bool test = split == GlueSplit::Test;
  std::ifstream in;
  open_text_input(in, path);
  std::vector<GlueExample> out;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1) strip_text_bom(line, path);  // UTF-8 BOM skipped, UTF-16 refused
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto cols = split_tabs(line);
    // Header rows: labelled files per task; test files (and headed files of headerless tasks)
    // start with "index" (QQP: "id").
    if (n == 1 && ((L.header && !test) || cols[0] == "index" || cols[0] == "id")) continue;
    auto col = [&](int i) -> const std::string& {
      const size_t k = i >= 0 ? static_cast<size_t>(i) : cols.size() - 1;
      BERTCC_CHECK(k < cols.size(), path, ":", n, ": expected at least ", k + 1, " tab-separated fields, found ",
                   cols.size());
      return cols[k];
    };
    GlueExample e;
    e.text_a = col(test ? L.test_a : L.a);
    const int b = test ? L.test_b : L.b;
    if (b >= 0) e.text_b = col(b);
    if (!test) e.label = col(L.label);
    out.push_back(std::move(e));
  }
  BERTCC_CHECK(!in.bad(), path, ": read error");
  BERTCC_CHECK(!out.empty(), path, ": no examples");
  return out;
}

double glue_accuracy(const std::vector<std::string>& p, const std::vector<std::string>& g) {
  BERTCC_CHECK(p.size() == g.size() && !g.empty(), "metrics: ", p.size(), " predictions for ", g.size(), " labels");
  size_t c = 0;
  for (size_t i = 0; i < g.size(); ++i) c += p[i] == g[i];
  return static_cast<double>(c) / static_cast<double>(g.size());
}

static void confusion(const std::vector<std::string>& p, const std::vector<std::string>& g, const std::string& pos,
                      double& tp, double& tn, double& fp, double& fn) {
  BERTCC_CHECK(p.size() == g.size() && !g.empty(), "metrics: ", p.size(), " predictions for ", g.size(), " labels");
  tp = tn = fp = fn = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool pp = p[i] == pos, gp = g[i] == pos;
    tp += pp && gp;
    tn += !pp && !gp;
    fp += pp && !gp;
    fn += !pp && gp;
  }
}

double glue_f1(const std::vector<std::string>& p, const std::vector<std::string>& g, const std::string& pos) {
  double tp, tn, fp, fn;
  confusion(p, g, pos, tp, tn, fp, fn);
  return tp == 0 ? 0.0 : 2 * tp / (2 * tp + fp + fn);
}

double matthews_corrcoef(const std::vector<std::string>& p, const std::vector<std::string>& g, const std::string& pos) {
  double tp, tn, fp, fn;
  confusion(p, g, pos, tp, tn, fp, fn);
  const double den = std::sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn));
  return den == 0 ? 0.0 : (tp * tn - fp * fn) / den;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  BERTCC_CHECK(x.size() == y.size() && x.size() > 1, "pearson: sizes ", x.size(), " and ", y.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(x.size());
  my /= static_cast<double>(y.size());
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxy / std::sqrt(sxx * syy);
}

static std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < v.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    const double avg = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = avg;
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) { return pearson(ranks(x), ranks(y)); }

nlohmann::ordered_json glue_metrics(const std::string& task, const std::vector<std::string>& pred,
                                    const std::vector<std::string>& gold) {
  const std::string t = layout(task).name;
  nlohmann::ordered_json r;
  if (t == "cola") {
    r["mcc"] = matthews_corrcoef(pred, gold, "1");
  } else if (t == "sts-b") {
    std::vector<double> p, g;
    for (size_t i = 0; i < pred.size(); ++i) p.push_back(std::stod(pred[i]));
    for (size_t i = 0; i < gold.size(); ++i) g.push_back(std::stod(gold[i]));
    r["pearson"] = pearson(p, g);
    r["spearman"] = spearman(p, g);
    r["corr"] = (r["pearson"].get<double>() + r["spearman"].get<double>()) / 2;
  } else if (t == "mrpc" || t == "qqp") {
    r["acc"] = glue_accuracy(pred, gold);
    r["f1"] = glue_f1(pred, gold, "1");
    r["acc_and_f1"] = (r["acc"].get<double>() + r["f1"].get<double>()) / 2;
  } else {
    r["acc"] = glue_accuracy(pred, gold);
  }
  return r;
}

std::string glue_task(const std::string& task) { return layout(task).name; }

std::vector<std::string> glue_labels(const std::string& task) {
  const std::string t = glue_task(task);
  if (t == "sts-b") return {};
  if (t == "mnli") return {"contradiction", "entailment", "neutral"};
  if (t == "qnli" || t == "rte") return {"entailment", "not_entailment"};
  return {"0", "1"};
}

std::string glue_primary_metric(const std::string& task) {
  const std::string t = glue_task(task);
  if (t == "cola") return "mcc";
  if (t == "sts-b") return "corr";
  if (t == "mrpc" || t == "qqp") return "acc_and_f1";
  return "acc";
}

std::string glue_submission_name(const std::string& task, bool mismatched) {
  const std::string t = glue_task(task);
  if (t == "mnli") return mismatched ? "MNLI-mm" : "MNLI-m";
  if (t == "cola") return "CoLA";
  std::string r = t;
  for (auto& c : r) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace bertcc
