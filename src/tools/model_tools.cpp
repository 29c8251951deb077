// bertcc init-model: a randomly initialised BERT as a Hugging Face model directory.
// bertcc random-batch: a random pre-training batch in NVIDIA's HDF5 layout, for checks and demos.
#include <algorithm>
#include <iostream>
#include <numeric>

#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/pretrain_data.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

void add_model_tools(CLI::App& app) {
  struct InitOpts {
    std::string config, output, vocab;
    uint64_t seed = 42;
  };
  auto io = std::make_shared<InitOpts>();
  auto* init = app.add_subcommand("init-model", "Write a randomly initialised BertForPreTraining (HF layout)");
  init->add_option("--config", io->config, "preset (bert-tiny ... bert-large) or config.json path")->required();
  init->add_option("--output", io->output, "model directory to create")->required();
  init->add_option("--vocab", io->vocab, "vocab.txt to copy into the directory; sets vocab_size");
  init->add_option(flag("--seed"), io->seed, "initialisation seed");
  init->callback([io]() {
    BertConfig cfg = config_from_name_or_path(io->config);
    if (!io->vocab.empty()) {
      const std::string v = read_file(io->vocab);
      const int64_t lines = std::count(v.begin(), v.end(), '\n') + (!v.empty() && v.back() != '\n');
      cfg.vocab_size = static_cast<int>(lines);  // the model's vocabulary is the given vocab.txt
    }
    Bert model(cfg, Heads::PreTraining);
    model.init_weights(io->seed);
    save_model_dir(model, io->output, io->vocab);
    std::cout << "wrote " << io->output << " (" << model.table().total() << " parameters, "
              << cfg.num_hidden_layers << " layers, hidden " << cfg.hidden_size << ")\n";
  });

  struct BatchOpts {
    std::string model, output;
    int64_t batch = 8, seq = 128, max_pred = 20;
    uint64_t seed = 1;
  };
  auto bo = std::make_shared<BatchOpts>();
  auto* rb = app.add_subcommand("random-batch",
                                "Write a random pre-training batch (NVIDIA HDF5 layout) for a model's vocabulary");
  rb->add_option("--model", bo->model, "model directory or preset (for vocab_size)")->required();
  rb->add_option("--output", bo->output, "output .h5")->required();
  rb->add_option("--batch", bo->batch, "rows")->check(CLI::PositiveNumber);
  rb->add_option("--seq", bo->seq, "sequence length")->check(CLI::Range(4, 100000));
  rb->add_option(flag("--max-predictions-per-seq"), bo->max_pred, "masked positions per row")
      ->check(CLI::PositiveNumber);
  rb->add_option(flag("--seed"), bo->seed, "random seed");
  rb->callback([bo]() {
    const BertConfig cfg = config_from_name_or_path(bo->model);
    BERTCC_CHECK(bo->seq <= cfg.max_position_embeddings, "--seq ", bo->seq, " exceeds max_position_embeddings ",
                 cfg.max_position_embeddings);
    BERTCC_CHECK(cfg.vocab_size > 4, bo->model, ": vocabulary too small");
    Rng rng{bo->seed, 0};
    auto below = [&](int64_t n) { return static_cast<int32_t>(rng.next_u32() % static_cast<uint32_t>(n)); };
    PretrainShard s;
    s.N = bo->batch;
    s.S = bo->seq;
    s.P = std::min<int64_t>(bo->max_pred, bo->seq - 3);
    for (int64_t r = 0; r < s.N; ++r) {
      const int64_t len = s.S - below(s.S / 4 + 1);  // some rows padded
      const int64_t sep = 2 + below(std::max<int64_t>(1, len - 4));
      for (int64_t t = 0; t < s.S; ++t) {
        const bool in = t < len;
        s.input_ids.push_back(in ? 1 + below(cfg.vocab_size - 1) : 0);
        s.input_mask.push_back(in ? 1 : 0);
        s.segment_ids.push_back(in && t > sep ? 1 : 0);
      }
      std::vector<int32_t> cand(static_cast<size_t>(len - 1));
      std::iota(cand.begin(), cand.end(), 1);
      for (size_t i = cand.size(); i > 1; --i) std::swap(cand[i - 1], cand[static_cast<size_t>(below(int64_t(i)))]);
      const int64_t k = std::min<int64_t>(s.P, static_cast<int64_t>(cand.size()));
      std::sort(cand.begin(), cand.begin() + k);
      for (int64_t j = 0; j < s.P; ++j) {
        s.masked_lm_positions.push_back(j < k ? cand[static_cast<size_t>(j)] : 0);
        s.masked_lm_ids.push_back(j < k ? below(cfg.vocab_size) : 0);
      }
      s.next_sentence_labels.push_back(below(2));
    }
    write_pretrain_shard(bo->output, s);
    std::cout << "wrote " << bo->output << " (" << s.N << " x " << s.S << ", up to " << s.P << " masked each)\n";
  });
}

}  // namespace bertcc::tools
