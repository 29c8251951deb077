// bertcc lr-find glue|classify|ner|squad|pretrain: Smith's learning-rate range test (fastai's
// lr_find, pytorch-lr-finder). The model is trained exactly as `finetune` (or `pretrain`) trains
// it, but each step's rate rises exponentially from --start-lr to --end-lr; the loss is smoothed
// (an exponential moving average with bias correction), the test stops once it diverges, and the
// suggested rate is the one at the smoothed loss's steepest descent. The model directory is only
// read: nothing is saved but the curve (OUTPUT/lr_find.json, OUTPUT/lr_find.svg).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/trainer.h"
#include "tools/finetune_common.h"

namespace bertcc::tools {
namespace {

struct Point {
  int64_t step;
  double lr, loss, smoothed;
};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// Loss (raw, faint; smoothed, bold) against the learning rate on a log axis, the suggestion marked.
// fastai's plot_lr_find(skip_end=5): the last steps, where the loss diverges, are left out, so
// the curve before them fills the plot (the divergence stays marked).
constexpr size_t kSkipEnd = 5;

std::string svg_plot(const std::vector<Point>& all, double suggested, double diverged, const std::string& title) {
  const double W = 720, H = 440, x0 = 70, y0 = 40, w = 620, h = 340;
  const std::vector<Point> pts(all.begin(), all.size() > 2 * kSkipEnd ? all.end() - kSkipEnd : all.end());
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& p : pts)
    if (std::isfinite(p.smoothed)) {
      lo = std::min(lo, p.smoothed);
      hi = std::max(hi, p.smoothed);
    }
  if (!(lo <= hi)) lo = 0, hi = 1;
  // The y range follows the smoothed curve (the raw loss past divergence would flatten it).
  const double span = std::max(hi - lo, 1e-9);
  lo -= 0.1 * span;
  hi += 0.1 * span;
  const double lx0 = std::log10(pts.front().lr), lx1 = std::max(std::log10(all.back().lr), lx0 + 1e-9);
  auto X = [&](double lr) { return x0 + w * (std::log10(lr) - lx0) / (lx1 - lx0); };
  auto Y = [&](double y) { return y0 + h - h * (std::clamp(y, lo, hi) - lo) / (hi - lo); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n";
  s << "<text x='" << x0 << "' y='24' font-size='15'>" << title << "</text>\n";
  s << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h << "' fill='none' stroke='#444'/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (hi - lo) * k / 4;
    s << "<line x1='" << x0 << "' x2='" << x0 + w << "' y1='" << Y(v) << "' y2='" << Y(v)
      << "' stroke='#ddd'/><text x='" << x0 - 6 << "' y='" << Y(v) + 4 << "' font-size='11' text-anchor='end'>"
      << num(v) << "</text>\n";
  }
  for (int e = static_cast<int>(std::ceil(lx0)); e <= static_cast<int>(std::floor(lx1)); ++e) {
    const double xx = X(std::pow(10.0, e));
    s << "<line x1='" << xx << "' x2='" << xx << "' y1='" << y0 << "' y2='" << y0 + h << "' stroke='#eee'/><text x='"
      << xx << "' y='" << y0 + h + 16 << "' font-size='11' text-anchor='middle'>1e" << e << "</text>\n";
  }
  s << "<text x='" << x0 + w / 2 << "' y='" << H - 12 << "' font-size='12' text-anchor='middle'>learning rate (log "
    << "scale)</text>\n<text x='16' y='" << y0 + h / 2 << "' font-size='12' transform='rotate(-90 16 " << y0 + h / 2
    << ")' text-anchor='middle'>training loss</text>\n";
  for (int pass = 0; pass < 2; ++pass) {
    s << "<polyline fill='none' stroke='" << (pass ? "#1f77b4" : "#aec7e8") << "' stroke-width='" << (pass ? 2 : 1)
      << "' points='";
    for (const auto& p : pts) {
      const double y = pass ? p.smoothed : p.loss;
      if (std::isfinite(y)) s << X(p.lr) << "," << Y(y) << " ";
    }
    s << "'/>\n";
  }
  if (suggested > 0)
    s << "<line x1='" << X(suggested) << "' x2='" << X(suggested) << "' y1='" << y0 << "' y2='" << y0 + h
      << "' stroke='#d62728' stroke-dasharray='4,3'/><text x='" << X(suggested) + 4 << "' y='" << y0 + 14
      << "' font-size='12' fill='#d62728'>suggested " << num(suggested) << "</text>\n";
  if (diverged > 0)
    s << "<line x1='" << X(diverged) << "' x2='" << X(diverged) << "' y1='" << y0 << "' y2='" << y0 + h
      << "' stroke='#7f7f7f' stroke-dasharray='2,3'/><text x='" << X(diverged) - 4 << "' y='" << y0 + 30
      << "' font-size='12' fill='#7f7f7f' text-anchor='end'>diverged " << num(diverged) << "</text>\n";
  s << "<text x='" << x0 + w - 8 << "' y='" << y0 + h - 24 << "' font-size='12' fill='#1f77b4' text-anchor='end'>"
    << "smoothed loss</text><text x='" << x0 + w - 8 << "' y='" << y0 + h - 8
    << "' font-size='12' fill='#aec7e8' text-anchor='end'>loss of each step</text>\n</svg>\n";
  return s.str();
}

}  // namespace

void check_lr_find(const LrFindCli& f) {
  BERTCC_CHECK(std::isfinite(f.start_lr) && f.start_lr > 0, "--start-lr must be a positive number, not ", f.start_lr);
  BERTCC_CHECK(std::isfinite(f.end_lr) && f.end_lr > f.start_lr, "--end-lr (", f.end_lr,
               ") must be larger than --start-lr (", f.start_lr, ")");
}

void add_lr_find_flags(CLI::App* sub, LrFindCli& f) {
  sub->add_option(flag("--start-lr"), f.start_lr, "learning rate of the first step")
      ->check(in_range(0, kFloatMax, "a learning rate", true));
  sub->add_option(flag("--end-lr"), f.end_lr,
                  "learning rate of the last step (the test stops earlier if the loss diverges)")
      ->check(in_range(0, kFloatMax, "a learning rate", true));
  sub->add_option(flag("--num-steps"), f.num_steps,
                  "steps from --start-lr to --end-lr, the rate multiplied by the same "
                  "factor each step")
      ->check(in_range(5, 100000, "steps, each a point of the curve"));
  sub->add_option(flag("--smoothing"), f.smoothing,
                  "weight of the past in the loss's moving average (fastai's beta; 0 = no smoothing)")
      ->check(in_range(0, 0.999, "a weight below 1"));
  sub->add_option(flag("--diverge-factor"), f.diverge_factor,
                  "stop once the smoothed loss exceeds this many times its minimum (fastai: 4)")
      ->check(in_range(1.01, 1e6, "a factor over the minimum"));
}

namespace {

// The test's curve: each step's rate (exponential from --start-lr to --end-lr), its loss and the
// smoothed loss, where it diverged, and the suggestion; the same for fine-tuning and pre-training.
class RangeCurve {
 public:
  explicit RangeCurve(const LrFindCli& f) : f_(f), ratio_(std::log(f.end_lr / f.start_lr)), lead_(is_lead()) {
    rt_.lr = [this](int64_t step) {
      return static_cast<float>(f_.start_lr *
                                std::exp(ratio_ * static_cast<double>(step) / static_cast<double>(f_.num_steps - 1)));
    };
    rt_.after_step = [this](int64_t step, float lr, double loss) { return after_step(step, lr, loss); };
  }
  const RangeTest& test() const { return rt_; }
  // Rank 0: OUTPUT/lr_find.json and lr_find.svg, and the suggestion on stdout.
  void report(const std::string& model, int64_t batch_size, const std::string& output_dir) const;

 private:
  bool after_step(int64_t step, float lr, double loss);

  const LrFindCli& f_;
  const double ratio_;
  const bool lead_;
  RangeTest rt_;
  std::vector<Point> pts_;
  double avg_ = 0, best_ = std::numeric_limits<double>::infinity();
  bool diverged_ = false;
};

bool RangeCurve::after_step(int64_t step, float lr, double loss) {
  const double beta = f_.smoothing;
  double smoothed = loss;
  if (std::isfinite(loss)) {
    avg_ = beta * avg_ + (1 - beta) * loss;
    smoothed = avg_ / (1 - std::pow(beta, static_cast<double>(step)));
  }
  pts_.push_back(Point{step, lr, loss, smoothed});
  if (lead_ && (step % 10 == 0 || step == f_.num_steps))
    std::cerr << "lr-find: step " << step << "/" << f_.num_steps << " lr " << num(lr) << " loss " << num(loss)
              << " smoothed " << num(smoothed) << "\n";
  if (!std::isfinite(loss) || (step > 1 && smoothed > f_.diverge_factor * best_)) {
    diverged_ = true;
    if (lead_)
      std::cerr << "lr-find: stopped at step " << step << ": the loss diverged at lr " << num(lr)
                << (std::isfinite(loss) ? " (smoothed loss " + num(smoothed) + " > " + num(f_.diverge_factor) +
                                              " x its minimum " + num(best_) + ")"
                                        : std::string(" (not finite)"))
                << "\n";
    return false;
  }
  best_ = std::min(best_, smoothed);
  return true;
}

void RangeCurve::report(const std::string& model, int64_t batch_size, const std::string& output_dir) const {
  if (!lead_) return;
  BERTCC_CHECK(!pts_.empty(), "lr-find: no step was run");
  const std::vector<Point>& pts = pts_;
  // The suggestion, as fastai's `steep`: the largest fall of the smoothed loss per unit of log(lr),
  // on the way down to its minimum, after the first tenth of the steps (the average is still
  // settling there); past the minimum the loss only falls back from a blow-up.
  std::vector<Point> fit(pts.begin(), pts.end());
  if (diverged_ && !fit.empty()) fit.pop_back();
  size_t lowest = 0;
  for (size_t i = 0; i < fit.size(); ++i)
    if (fit[i].smoothed < fit[lowest].smoothed) lowest = i;
  const double min_lr = fit.empty() ? 0 : fit[lowest].lr;
  const size_t skip = pts.size() / 10;
  double suggested = 0, steepest = 0;
  for (size_t i = skip + 1; i <= lowest; ++i) {
    const double g = (fit[i].smoothed - fit[i - 1].smoothed) / (std::log(fit[i].lr) - std::log(fit[i - 1].lr));
    if (std::isfinite(g) && g < steepest) {
      steepest = g;
      suggested = fit[i - 1].lr;
    }
  }
  const double diverged_lr = diverged_ ? pts.back().lr : 0;
  nlohmann::ordered_json j{
      {"model", model},
      {"start_lr", f_.start_lr},
      {"end_lr", f_.end_lr},
      {"num_steps", f_.num_steps},
      {"steps_run", static_cast<int64_t>(pts.size())},
      {"train_batch_size", batch_size},
      {"smoothing", f_.smoothing},
      {"diverged", diverged_},
      {"diverged_lr", diverged_ ? nlohmann::ordered_json(diverged_lr) : nlohmann::ordered_json()},
      {"suggested_lr", suggested > 0 ? nlohmann::ordered_json(suggested) : nlohmann::ordered_json()},
      {"min_loss_lr", min_lr > 0 ? nlohmann::ordered_json(min_lr) : nlohmann::ordered_json()}};
  auto& arr = j["points"] = nlohmann::ordered_json::array();
  for (const auto& p : pts)
    arr.push_back(
        {{"step", p.step},
         {"lr", p.lr},
         {"loss", std::isfinite(p.loss) ? nlohmann::ordered_json(p.loss) : nlohmann::ordered_json()},
         {"smoothed_loss", std::isfinite(p.smoothed) ? nlohmann::ordered_json(p.smoothed) : nlohmann::ordered_json()}});
  const std::string json_path = join_path(output_dir, "lr_find.json"), svg_path = join_path(output_dir, "lr_find.svg");
  write_file_atomic(json_path, j.dump(2) + "\n");
  write_file_atomic(svg_path, svg_plot(pts, suggested, diverged_lr, "lr-find: " + model));
  std::ostringstream out;
  out << "lr-find: " << pts.size() << " steps from " << num(f_.start_lr) << " to " << num(pts.back().lr)
      << (diverged_                                         ? " (diverged)"
          : static_cast<int64_t>(pts.size()) < f_.num_steps ? " (stopped by a signal: the curve so far)"
                                                            : "")
      << "\n";
  if (suggested > 0)
    out << "suggested learning rate: " << num(suggested) << " (steepest descent of the smoothed loss)\n";
  else
    out << "suggested learning rate: none (the smoothed loss never fell: widen --start-lr/--end-lr or add "
           "--num-steps)\n";
  if (min_lr > 0)
    out << "lowest smoothed loss at: " << num(min_lr) << " (fastai's minimum/10: " << num(min_lr / 10) << ")\n";
  if (diverged_) out << "diverged at: " << num(diverged_lr) << "\n";
  out << "curve: " << svg_path << ", " << json_path << "\n";
  std::cout << out.str();
}

}  // namespace

FinetuneResult finetune_or_find(Bert& model, const std::vector<FtFeature>& train, const Evaluator& eval, const FtCli& o,
                                const FtSetup& s) {
  if (!o.lr_find) {
    FinetuneResult r = run_finetune(model, train, eval, ft_options(o, s));
    if (!r.stopped && is_lead()) record_fine_tuned_length(o.output_dir, o.max_seq_length);
    return r;
  }
  const LrFindCli& f = *o.lr_find;
  check_lr_find(f);
  FinetuneOptions fo = ft_options(o, s);
  fo.max_steps = f.num_steps;
  fo.quiet = true;
  fo.num_steps_per_checkpoint = 0;
  RangeCurve curve(f);
  fo.range_test = &curve.test();
  run_finetune(model, train, Evaluator{}, fo);
  FinetuneResult res;
  res.stopped = true;  // the task prints nothing more and writes no model
  curve.report(o.init_checkpoint, o.train_batch_size, o.output_dir);
  return res;
}

// lr-find pretrain: the pre-training step of `pretrain` (BERT or ELECTRA, LAMB or AdamW) with the
// test's rates; the model in --model (or a fresh --config one) is only read.
void add_lr_find_pretrain(CLI::App* lf) {
  auto o = std::make_shared<PretrainOptions>();
  auto f = std::make_shared<LrFindCli>();
  auto* sub = lf->add_subcommand("pretrain",
                                 "range test of pre-training (BERT or ELECTRA) from --model or a fresh --config model");
  add_pretrain_flags(sub, *o, /*range_test=*/true);
  add_lr_find_flags(sub, *f);
  sub->callback([o, f]() {
    check_lr_find(*f);
    o->max_steps = f->num_steps;
    o->num_steps_per_checkpoint = 0;
    RangeCurve curve(*f);
    o->range_test = &curve.test();
    const int rc = run_pretraining(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
    curve.report(o->init_checkpoint.empty() ? "a new " + o->config + " model" : o->init_checkpoint, o->train_batch_size,
                 o->output_dir);
  });
}

// The tasks' commands are finetune's, whose texts speak of evaluation and prediction: a range test
// only trains, so it says what it reads and drops the flags it would ignore.
void describe_range_tests(CLI::App* lf) {
  const std::pair<const char*, const char*> what[] = {
      {"glue", "range test on a GLUE task's training set (DATA_DIR/train.tsv or --train-file)"},
      {"classify", "range test on labelled CSV/TSV training data (--train-file; the columns as finetune classify)"},
      {"ner", "range test on a CoNLL training file (--train-file)"},
      {"squad", "range test on SQuAD v1.1/v2.0 training data (--train-file)"}};
  for (const auto& [name, text] : what) {
    CLI::App* sub = lf->get_subcommand(name);
    sub->description(text);
    for (const char* unused : {"--predict-file", "--eval-batch-size", "--n-best-size", "--max-answer-length",
                               "--version-2-with-negative", "--null-score-diff-threshold", "--label-names"})
      if (CLI::Option* opt = sub->get_option_no_throw(unused)) sub->remove_option(opt);
    if (CLI::Option* opt = sub->get_option_no_throw("--train-file"))
      opt->description(std::string(opt->get_description()) + " (the range test's data)");
  }
}

void add_lr_find(CLI::App& app) {
  auto* lf = app.add_subcommand(
      "lr-find",
      "Learning-rate range test (Smith; fastai's lr_find): train from a model with the rate rising exponentially, "
      "plot the loss against it, suggest a rate; the model is left untouched");
  lf->require_subcommand(1);
  add_finetune_glue_classify(lf);
  add_finetune_ner(lf);
  add_finetune_squad(lf);
  describe_range_tests(lf);
  add_lr_find_pretrain(lf);
}

}  // namespace bertcc::tools
