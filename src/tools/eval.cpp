// bertcc eval squad: the official SQuAD v1.1 / v2.0 metrics.
#include <fstream>
#include <iomanip>
#include <iostream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/glue.h"
#include "bertcc/ner.h"
#include "bertcc/squad_eval.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

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
  sq->add_option(flag("--na-prob-thresh"), o->thresh, "predict no answer above this null probability (default 1.0)");
  sq->callback([o]() { std::cout << evaluate_squad(o->data, o->preds, o->na, o->thresh).dump() << "\n"; });

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
    int64_t n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (n == 1) strip_text_bom(line, g->preds);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (n == 1 && line.rfind("index\t", 0) == 0) continue;  // submission header
      const size_t tab = line.find('\t');
      pred.push_back(tab == std::string::npos ? line : line.substr(tab + 1));
    }
    BERTCC_CHECK(pred.size() == gold.size(), g->preds, ": ", pred.size(), " predictions for ", gold.size(),
                 " examples in ", g->data);
    std::cout << glue_metrics(g->task, pred, gold).dump() << "\n";
  });

  struct NOpts {
    std::string data, preds;
    bool json = false;
  };
  auto n = std::make_shared<NOpts>();
  auto* ne = ev->add_subcommand("ner", "entity-level precision/recall/F1 as seqeval (CoNLL files, IOB1 or IOB2): its classification report, or --json");
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
    if (n->json) std::cout << m.dump() << "\n";
    else std::cout << ner_classification_report(m);
  });
}

}  // namespace bertcc::tools
