// bertcc eval squad: the official SQuAD v1.1 / v2.0 metrics.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/glue.h"
#include "bertcc/ner.h"
#include "bertcc/squad_eval.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

namespace {
std::string listed(const std::vector<std::string>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 10; ++i) s += (i ? ", " : "") + ids[i];
  return ids.size() > 10 ? s + ", ... (" + std::to_string(ids.size()) + " in all)" : s;
}

// Predictions for every one of the data's questions: the official script names each unanswered
// question and scores it 0, which hides a truncated or mismatched file, so a missing answer is an
// error naming the ids. Predictions for ids the data lacks are ignored with a note naming them, as
// the official script ignores them (a full predictions file scored on an excerpt of the data),
// unless answers are missing too: then the file is for another set, and both lists are named.
void check_squad_ids(const std::string& data_path, const std::string& preds_path) {
  nlohmann::json data, preds;
  try {
    data = nlohmann::json::parse(read_text_file(data_path));
    preds = nlohmann::json::parse(read_text_file(preds_path));
  } catch (const nlohmann::json::exception& e) {
    fail(data.is_null() ? data_path : preds_path, ": invalid JSON: ", e.what());
  }
  BERTCC_CHECK(preds.is_object(), preds_path, ": expected a JSON object {question id: answer text}");
  BERTCC_CHECK(data.is_object() && data.contains("data") && data["data"].is_array(), data_path,
               ": expected SQuAD JSON {\"data\": [...]}");
  std::set<std::string> ids;
  std::vector<std::string> missing, unknown;
  for (const auto& article : data["data"])
    for (const auto& para : article.value("paragraphs", nlohmann::json::array()))
      for (const auto& qa : para.value("qas", nlohmann::json::array())) {
        if (!qa.contains("id") || !qa["id"].is_string()) continue;  // (the metrics' reader names it)
        const std::string id = qa["id"].get<std::string>();
        ids.insert(id);
        if (!preds.contains(id)) missing.push_back(id);
      }
  for (auto it = preds.begin(); it != preds.end(); ++it)
    if (!ids.count(it.key())) unknown.push_back(it.key());
  const std::string unknown_text = std::to_string(unknown.size()) + " prediction(s) for question ids that " +
                                   data_path + " does not have: " + listed(unknown);
  BERTCC_CHECK(missing.empty(), preds_path, ": ", missing.size(), " of the ", ids.size(), " questions of ", data_path,
               " unanswered (no prediction): ", listed(missing),
               "; a question with no answer (SQuAD 2.0) is predicted as \"\"",
               unknown.empty() ? "" : "; and " + unknown_text);
  if (!unknown.empty())
    std::cerr << "eval squad: note: " << preds_path << ": " << unknown_text
              << " (ignored, as the official script ignores them)\n";
}

// GLUE labels: a classification task's predictions (and gold labels) are its labels as the GLUE
// files spell them; STS-B's are finite numbers. `lines`: each entry's line (empty: its position).
void check_glue_labels(const std::string& task, const std::vector<std::string>& v, const std::string& path,
                       const std::vector<int64_t>& lines) {
  const std::vector<std::string> labels = glue_labels(task);
  const std::set<std::string> known(labels.begin(), labels.end());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = lines.empty() ? "example " + std::to_string(i + 1) : "line " + std::to_string(lines[i]);
    if (labels.empty()) {
      char* end = nullptr;
      const double x = std::strtod(v[i].c_str(), &end);
      BERTCC_CHECK(!v[i].empty() && end == v[i].c_str() + v[i].size() && std::isfinite(x), path, ": ", where, ": '",
                   v[i], "' is not a finite number (", glue_task(task), " is scored as a regression)");
      continue;
    }
    if (known.count(v[i])) continue;
    std::string set;
    for (const auto& l : labels) set += (set.empty() ? "" : ", ") + l;
    fail(path, ": ", where, ": '", v[i], "' is not a label of ", glue_task(task), " (", set, ")");
  }
}
}  // namespace

void add_eval(CLI::App& app) {
  auto* ev = app.add_subcommand("eval", "Evaluate predictions with the official metrics");
  ev->require_subcommand(1);
  struct Opts {
    std::string data, preds, na;
    double thresh = 1.0;
  };
  auto o = std::make_shared<Opts>();
  auto* sq = ev->add_subcommand("squad", "SQuAD v1.1 / v2.0 (as evaluate-v1.1.py / evaluate-v2.0.py)");
  sq->add_option("--data", o->data, "dev-v1.1.json or dev-v2.0.json")->required();
  sq->add_option("--predictions", o->preds, "predictions.json {id: answer text}")->required();
  sq->add_option(flag("--na-prob"), o->na, "null_odds.json (v2.0)");
  sq->add_option(flag("--na-prob-thresh"), o->thresh, "predict no answer above this null probability (default 1.0)")
      ->check(in_range(0, 1, "a probability"));
  sq->callback([o]() {
    check_squad_ids(o->data, o->preds);
    std::cout << evaluate_squad(o->data, o->preds, o->na, o->thresh).dump() << "\n";
  });

  struct GOpts {
    std::string task, data, preds;
  };
  auto g = std::make_shared<GOpts>();
  auto* gl = ev->add_subcommand("glue", "GLUE metrics (CoLA mcc, STS-B pearson/spearman, MRPC/QQP acc+f1, else acc)");
  gl->add_option(flag("--task-name"), g->task, "cola, sst-2, mrpc, sts-b, qqp, mnli, mnli-mm, qnli, rte, wnli")
      ->required();
  gl->add_option("--data", g->data, "the labelled TSV (e.g. dev.tsv)")->required();
  gl->add_option("--predictions", g->preds,
                 "one prediction per line in data order, or GLUE's submission format (index<TAB>prediction)")
      ->required();
  gl->callback([g]() {
    const auto ex = read_glue(g->task, g->data);
    std::vector<std::string> gold, pred;
    for (const auto& e : ex) gold.push_back(e.label);
    std::ifstream in;
    open_text_input(in, g->preds);
    std::string line;
    std::vector<int64_t> lines;
    int64_t n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (n == 1) strip_text_bom(line, g->preds);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (n == 1 && line.rfind("index\t", 0) == 0) continue;  // submission header
      const size_t tab = line.find('\t');
      pred.push_back(tab == std::string::npos ? line : line.substr(tab + 1));
      lines.push_back(n);
    }
    BERTCC_CHECK(pred.size() == gold.size(), g->preds, ": ", pred.size(), " predictions for ", gold.size(),
                 " examples in ", g->data);
    check_glue_labels(g->task, gold, g->data, {});
    check_glue_labels(g->task, pred, g->preds, lines);
    std::cout << glue_metrics(g->task, pred, gold).dump() << "\n";
  });

  struct NOpts {
    std::string data, preds;
    bool json = false;
  };
  auto n = std::make_shared<NOpts>();
  auto* ne = ev->add_subcommand(
      "ner",
      "entity-level precision/recall/F1 as seqeval (CoNLL files, IOB1 or IOB2): its classification report, or --json");
  ne->add_option("--data", n->data, "gold CoNLL file (tag in the last column)")->required();
  ne->add_option("--predictions", n->preds,
                 "predicted CoNLL file with the same words and sentences (tag in the last column)")
      ->required();
  ne->add_flag("--json", n->json,
               "one JSON line (precision, recall, f1, accuracy, entities, per_type) instead of seqeval's "
               "classification report");
  ne->callback([n]() {
    const auto gold = read_conll(n->data), pred = read_conll(n->preds);
    BERTCC_CHECK(gold.size() == pred.size(), n->preds, ": ", pred.size(), " sentences, ", n->data, " has ",
                 gold.size());
    std::vector<std::vector<std::string>> g, p;
    for (size_t i = 0; i < gold.size(); ++i) {
      BERTCC_CHECK(gold[i].words == pred[i].words, n->preds, ":", pred[i].line, ": sentence differs from ", n->data,
                   ":", gold[i].line);
      BERTCC_CHECK(!gold[i].tags.empty() && !pred[i].tags.empty(), "both files need a tag column");
      g.push_back(gold[i].tags);
      p.push_back(pred[i].tags);
    }
    const auto m = ner_metrics(g, p);
    if (n->json)
      std::cout << m.dump() << "\n";
    else
      std::cout << ner_classification_report(m);
  });
}

}  // namespace bertcc::tools
