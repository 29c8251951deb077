// bertcc eval squad: the official SQuAD v1.1 / v2.0 metrics.
#include <iomanip>
#include <iostream>

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
}

}  // namespace bertcc::tools
