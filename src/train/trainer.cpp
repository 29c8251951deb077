#include "bertcc/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bertcc/error.h"
#include "bertcc/model_dir.h"
#include "bertcc/runtime.h"
#include "bertcc/tensorboard.h"
#include "bertcc/tokenizer.h"
#include "train/checkpoint.h"
#include "train/dllogger.h"
#include "train/stop_signal.h"

namespace bertcc {

int run_pretraining(const PretrainOptions& o) {
  set_threads(o.threads);
  const Precision prec = parse_precision(o.precision);
  BERTCC_CHECK(o.optimizer == "lamb" || o.optimizer == "adamw", "--optimizer must be lamb or adamw");
  BERTCC_CHECK(o.gradient_accumulation_steps >= 1 && o.train_batch_size % o.gradient_accumulation_steps == 0,
               "--train-batch-size (", o.train_batch_size, ") must be a multiple of --gradient-accumulation-steps (",
               o.gradient_accumulation_steps, ")");
  BERTCC_CHECK(o.max_steps >= 1, "--max-steps must be positive");
  BERTCC_CHECK(!o.output_dir.empty(), "--output-dir is required");
  std::filesystem::create_directories(o.output_dir);
  std::cerr << describe_backend(prec == Precision::BF16) << "\n";

  // Model: an HF checkpoint, or a fresh initialisation from a config and vocabulary.
  std::unique_ptr<Bert> model;
  int32_t cls = 101, sep = 102, mask = 103;
  std::unique_ptr<Vocab> vocab;
  if (!o.vocab.empty()) vocab = std::make_unique<Vocab>(Vocab::load(o.vocab));
  if (!o.init_checkpoint.empty()) {
    model = load_model_dir(o.init_checkpoint, Heads::PreTraining);
  } else {
    BertConfig cfg = config_from_name_or_path(o.config);
    if (vocab) cfg.vocab_size = vocab->size();
    model = std::make_unique<Bert>(cfg, Heads::PreTraining);
    model->init_weights(o.seed);
  }
  if (vocab) {
    const Vocab& v = *vocab;
    BERTCC_CHECK(v.size() == model->config().vocab_size, o.vocab, ": ", v.size(), " entries but the model has ",
                 model->config().vocab_size);
    cls = v.id("[CLS]");
    sep = v.id("[SEP]");
    mask = v.id("[MASK]");
  }
  MaskingOptions mopt;
  mopt.max_predictions_per_seq = o.max_predictions_per_seq;
  mopt.vocab_size = model->config().vocab_size;
  mopt.cls_id = cls;
  mopt.sep_id = sep;
  mopt.mask_id = mask;
  const int64_t micro = o.train_batch_size / o.gradient_accumulation_steps;
  PretrainLoader loader(list_shards(o.input_dir), micro, o.seed, mopt, 0, 1, o.length_binning);

  AdamState opt;
  TrainerState st;
  st.rng = Rng{o.seed, 0};
  const bool fp16 = prec == Precision::F16;
  const bool dynamic_scale = fp16 && o.loss_scale <= 0;
  st.loss_scale = fp16 ? (dynamic_scale ? o.init_loss_scale : o.loss_scale) : 1.0;
  const bool loaded = o.resume_from_checkpoint && load_latest_checkpoint(o.output_dir, *model, opt, st);
  if (o.resume_from_checkpoint && !loaded)
    std::cerr << "pretrain: no valid checkpoint in " << o.output_dir << "/checkpoints; starting from step 0\n";
  if (o.phase2 && (!loaded || st.phase == 1)) {
    // Start of phase 2 (NVIDIA): phase-1 weights and moments, optimizer step, schedule and data
    // position restarted; steps are named from the phase-1 end step on.
    if (loaded)
      BERTCC_CHECK(o.phase1_end_step <= 0 || st.step == o.phase1_end_step, "--phase1-end-step ", o.phase1_end_step,
                   " but the newest phase-1 checkpoint is at step ", st.step);
    st.step_offset = loaded ? st.step : o.phase1_end_step;
    st.step = 0;
    st.phase = 2;
    st.cursor = DataCursor{};
    st.rng = Rng{o.seed, 0};
    opt.step = 0;
    std::cerr << "pretrain: phase 2 starts after phase-1 step " << st.step_offset << "\n";
  }
  BERTCC_CHECK(!loaded || o.phase2 || st.phase == 1, o.output_dir,
               ": the newest checkpoint is from phase 2; add --phase2 to resume it");
  DLLogger log(o.output_dir + "/dllogger.json");
  TensorBoardWriter tb(o.output_dir + "/tensorboard");
  nlohmann::ordered_json params;
  for (const auto& [k, v] : std::initializer_list<std::pair<const char*, nlohmann::ordered_json>>{
           {"train_batch_size", o.train_batch_size},
           {"gradient_accumulation_steps", o.gradient_accumulation_steps},
           {"learning_rate", o.learning_rate},
           {"max_steps", o.max_steps},
           {"warmup_proportion", o.warmup_proportion},
           {"optimizer", o.optimizer},
           {"precision", o.precision},
           {"seed", o.seed},
           {"start_step", st.step + st.step_offset},
           {"phase", st.phase},
           {"phase1_end_step", st.step_offset}})
    params[k] = v;
  log.log("PARAMETER", params);

  // Held-out evaluation: the first eval_batches micro-batches of the eval shards, dropout off.
  std::unique_ptr<PretrainLoader> eval_loader;
  if (!o.eval_dir.empty()) eval_loader = std::make_unique<PretrainLoader>(list_shards(o.eval_dir), micro, o.seed, mopt);
  auto evaluate = [&]() {
    DataCursor c;
    PretrainLoss sum;
    double loss = 0;
    int64_t nsp_n = 0;
    Rng eval_rng{0, 0};
    for (int64_t b = 0; b < o.eval_batches; ++b) {
      const BertBatch batch = eval_loader->next(c);
      const PretrainLoss l = model->pretrain_step(batch, false, false, prec, eval_rng);
      loss += l.loss;
      sum.mlm_count += l.mlm_count;
      sum.mlm_correct += l.mlm_correct;
      sum.nsp_correct += l.nsp_correct;
      nsp_n += batch.B;
    }
    nlohmann::ordered_json d;
    d["eval.loss"] = loss / static_cast<double>(o.eval_batches);
    d["eval.mlm_accuracy"] =
        static_cast<double>(sum.mlm_correct) / static_cast<double>(std::max<int64_t>(1, sum.mlm_count));
    d["eval.nsp_accuracy"] = static_cast<double>(sum.nsp_correct) / static_cast<double>(std::max<int64_t>(1, nsp_n));
    log.log({st.cursor.epoch, st.step + st.step_offset}, d);
    for (const char* k : {"eval.loss", "eval.mlm_accuracy", "eval.nsp_accuracy"})
      tb.scalar(std::string("eval/") + (k + 5), d[k].get<float>(), st.step + st.step_offset);
    std::printf("%seval at step %lld: loss %.4f, MLM accuracy %.4f, NSP accuracy %.4f (%lld masked tokens)\n",
                ::isatty(1) ? "\n" : "", static_cast<long long>(st.step + st.step_offset), d["eval.loss"].get<double>(),
                d["eval.mlm_accuracy"].get<double>(), d["eval.nsp_accuracy"].get<double>(),
                static_cast<long long>(sum.mlm_count));
    std::fflush(stdout);
  };
  const int64_t eval_every = o.eval_freq > 0 ? o.eval_freq : o.num_steps_per_checkpoint;

  install_stop_signals();
  LambOptions lamb;
  AdamWOptions adamw;
  const bool tty = ::isatty(1);
  auto t_last = std::chrono::steady_clock::now();
  int64_t skipped_total = 0;
  int64_t seqs_since = 0;
  while (st.step < o.max_steps && !stop_signal()) {
    model->zero_grad();
    PretrainLoss sum;
    const float scale = static_cast<float>(st.loss_scale);
    for (int64_t a = 0; a < o.gradient_accumulation_steps; ++a) {
      const BertBatch batch = loader.next(st.cursor);
      const PretrainLoss l = model->pretrain_step(batch, true, true, prec, st.rng, scale);
      sum.loss += l.loss;
      sum.mlm_loss += l.mlm_loss;
      sum.nsp_loss += l.nsp_loss;
      seqs_since += batch.B;
    }
    const double inv = 1.0 / static_cast<double>(o.gradient_accumulation_steps);
    // Unscale (loss scale and accumulation) and check for inf/NaN: an overflowing step is skipped
    // and, with dynamic scaling, the scale halves; after loss_scale_window clean steps it doubles.
    const double gnorm = global_norm(model->grads().data(), model->grads().size());
    const bool overflow = !std::isfinite(gnorm) || !std::isfinite(sum.loss);
    // NVIDIA's scheduler: the learning rate of optimizer step k uses progress k / max_steps.
    const float lr =
        o.optimizer == "lamb"
            ? poly_warmup_lr(static_cast<float>(o.learning_rate), st.step, o.max_steps, o.warmup_proportion)
            : linear_warmup_lr(static_cast<float>(o.learning_rate), st.step, o.max_steps, o.warmup_proportion);
    if (overflow) {
      ++skipped_total;
      std::fprintf(stderr, "%spretrain: step %lld: gradient overflow (loss scale %g), step skipped\n",
                   ::isatty(1) ? "\n" : "", static_cast<long long>(st.step + st.step_offset + 1), st.loss_scale);
      if (dynamic_scale) st.loss_scale = std::max(1.0, st.loss_scale / 2);
      st.clean_steps = 0;
    } else {
      const float unscale = static_cast<float>(inv / st.loss_scale);
      if (unscale != 1.0f)
        for (auto& g : model->grads()) g *= unscale;
      // The norm computed for the overflow check serves the optimizer's clipping (no second pass).
      const double norm = unscale == 1.0f ? gnorm : global_norm(model->grads().data(), model->grads().size());
      if (o.optimizer == "lamb")
        lamb_step(model->table(), model->params().data(), model->grads().data(), opt, lr, lamb, norm);
      else
        adamw_step(model->table(), model->params().data(), model->grads().data(), opt, lr, adamw, norm);
      if (dynamic_scale && ++st.clean_steps >= o.loss_scale_window) {
        st.loss_scale *= 2;
        st.clean_steps = 0;
      }
    }
    ++st.step;
    if (st.step % o.log_freq == 0 || st.step == o.max_steps) {
      const auto now = std::chrono::steady_clock::now();
      const double secs = std::chrono::duration<double>(now - t_last).count();
      const double sps = seqs_since / std::max(secs, 1e-9);
      t_last = now;
      seqs_since = 0;
      nlohmann::ordered_json d;
      d["loss"] = sum.loss * inv;
      d["mlm_loss"] = sum.mlm_loss * inv;
      d["nsp_loss"] = sum.nsp_loss * inv;
      d["learning_rate"] = lr;
      d["loss_scale"] = st.loss_scale;
      d["skipped_steps"] = skipped_total;
      d["seq_per_s"] = sps;
      log.log({st.cursor.epoch, st.step + st.step_offset}, d);
      for (const char* k : {"loss", "mlm_loss", "nsp_loss", "learning_rate", "seq_per_s"})
        tb.scalar(std::string("train/") + k, d[k].get<float>(), st.step + st.step_offset);
      char line[200];
      std::snprintf(line, sizeof line, "step %lld/%lld loss %.4f (mlm %.4f nsp %.4f) lr %.3g %.1f seq/s",
                    static_cast<long long>(st.step), static_cast<long long>(o.max_steps), sum.loss * inv,
                    sum.mlm_loss * inv, sum.nsp_loss * inv, lr, sps);
      if (tty) {
        const int width = 30, done = static_cast<int>(width * st.step / o.max_steps);
        std::printf("\r[%.*s%*s] %s", done, "##############################", width - done, "", line);
        if (st.step == o.max_steps) std::printf("\n");
      } else {
        std::printf("%s\n", line);
      }
      std::fflush(stdout);
    }
    if (o.num_steps_per_checkpoint > 0 && st.step % o.num_steps_per_checkpoint == 0 && st.step < o.max_steps)
      save_checkpoint(o.output_dir, *model, opt, st, o.vocab, o.keep_checkpoints);
    if (eval_loader && eval_every > 0 && st.step % eval_every == 0 && st.step < o.max_steps) evaluate();
  }
  if (eval_loader && st.step >= o.max_steps) evaluate();
  save_checkpoint(o.output_dir, *model, opt, st, o.vocab, o.keep_checkpoints);
  if (st.step >= o.max_steps) save_model_dir(*model, o.output_dir + "/model", o.vocab);
  std::cerr << (stop_signal() ? "pretrain: stopped by signal after step " : "pretrain: finished at step ") << st.step
            << "; checkpoint in " << o.output_dir << "/checkpoints/step_" << st.step + st.step_offset << "\n";
  return 0;
}

}  // namespace bertcc
