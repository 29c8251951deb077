// bertcc init-model: a randomly initialised BERT as a Hugging Face model directory.
// bertcc random-batch: a random pre-training batch in NVIDIA's HDF5 layout, for checks and demos.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <set>

#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/model_dir.h"
#include "bertcc/onnx_export.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/runtime.h"
#include "bertcc/tokenizer.h"
#include "bertcc/torch_checkpoint.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

namespace {

// bertcc init-model
void add_init_model(CLI::App& app) {
  struct InitOpts {
    std::string config, output, vocab;
    uint64_t seed = 42;
  };
  auto io = std::make_shared<InitOpts>();
  auto* init = app.add_subcommand("init-model",
                                  "Write a randomly initialised BertForPreTraining, or ElectraForPreTraining for an "
                                  "ELECTRA config (HF layout)");
  init->add_option("--config", io->config, "preset (" + config_preset_names() + ") or config.json path")->required();
  init->add_option(flag("--output-dir", {"--output"}), io->output, "model directory to create")->required();
  init->add_option("--vocab", io->vocab, "vocab.txt to copy into the directory (required); sets vocab_size");
  init->add_option(flag("--seed"), io->seed, "initialisation seed")->check(in_range(0, kMaxSeed, "a seed"));
  init->callback([io]() {
    check_output_not_input(io->output, "--output-dir", io->config, "--config");
    check_output_not_input(io->output, "--output-dir", io->vocab, "--vocab");
    BertConfig cfg = config_from_name_or_path(io->config);
    if (!io->vocab.empty()) {
      const std::string v = read_text_file(io->vocab);
      const int64_t lines = std::count(v.begin(), v.end(), '\n') + (!v.empty() && v.back() != '\n');
      cfg.vocab_size = static_cast<int>(lines);  // the model's vocabulary is the given vocab.txt
    }
    Bert model(cfg, cfg.electra() ? Heads::Discriminator : Heads::PreTraining);  // (refuses sizes that do not fit)
    // A model directory carries its vocabulary (and tokenizer files): the commands that read it need them.
    BERTCC_CHECK(!io->vocab.empty(),
                 "init-model: --vocab is required (the vocab.txt the model's inputs are "
                 "tokenized with; it sets vocab_size and is copied into --output with the tokenizer files)");
    model.init_weights(io->seed);
    save_model_dir(model, io->output, io->vocab);
    std::cout << "wrote " << io->output << " (" << model.table().total() << " parameters, " << cfg.num_hidden_layers
              << " layers, hidden " << cfg.hidden_size << ")\n";
  });
}

// bertcc random-batch
void add_random_batch(CLI::App& app) {
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
  rb->add_option(flag("--batch-size", {"--batch"}), bo->batch, "rows")
      ->check(in_range(1, kMaxBatch, "rows, held in memory"));
  rb->add_option(flag("--max-seq-length", {"--seq"}), bo->seq, "sequence length")
      ->check(in_range(4, 100000, "tokens per row"));
  rb->add_option(flag("--max-predictions-per-seq"), bo->max_pred, "masked positions per row")
      ->check(in_range(1, 100000, "masked positions per row"));
  rb->add_option(flag("--seed"), bo->seed, "random seed")->check(in_range(0, kMaxSeed, "a seed"));
  rb->callback([bo]() {
    check_output_not_input(bo->output, "--output", bo->model, "--model");
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

// bertcc convert --from pt FILE --out DIR: a PyTorch checkpoint to a model directory.
void add_convert(CLI::App& app) {
  struct ConvOpts {
    std::string from = "pt", input, out, config, vocab;
    bool lower = false, no_lower = false;
  };
  auto co = std::make_shared<ConvOpts>();
  auto* conv = app.add_subcommand(
      "convert",
      "Convert a PyTorch checkpoint (torch.save: HF pytorch_model.bin, NVIDIA {'model': ...}) to a model "
      "directory (safetensors); the pickle is read, never run");
  conv->add_option("--from", co->from, "input format")->check(CLI::IsMember({"pt"}));
  conv->add_option("input", co->input, "checkpoint file")->required();
  conv->add_option(flag("--output-dir", {"--out", "--output"}), co->out, "model directory to write")->required();
  conv->add_option(
      "--config", co->config,
      "config.json / bert_config.json or preset (default: config.json or bert_config.json next to the file)");
  conv->add_option("--vocab", co->vocab, "vocab.txt to copy (default: vocab.txt next to the file; one is required)");
  conv->add_flag(flag("--do-lower-case"), co->lower, "tokenizer lower-cases (default: guessed from the vocabulary)");
  conv->add_flag(flag("--no-lower-case"), co->no_lower, "tokenizer keeps case");
  conv->callback([co]() {
    namespace fs = std::filesystem;
    BERTCC_CHECK(!(co->lower && co->no_lower), "--do-lower-case and --no-lower-case contradict each other");
    for (const auto& [in, flag] :
         {std::pair{co->input, "checkpoint"}, {co->config, "--config"}, {co->vocab, "--vocab"}})
      check_output_not_input(co->out, "--output-dir", in, flag);
    const std::string here = fs::path(co->input).parent_path().string();
    std::string cfg_path = co->config;
    if (cfg_path.empty()) {
      for (const char* n : {"config.json", "bert_config.json"})
        if (cfg_path.empty() && file_exists(join_path(here.empty() ? "." : here, n)))
          cfg_path = join_path(here.empty() ? "." : here, n);
      BERTCC_CHECK(!cfg_path.empty(), co->input, ": no config.json or bert_config.json next to it; pass --config");
    }
    BERTCC_CHECK(!fs::exists(co->out) || (fs::is_directory(co->out) && fs::is_empty(co->out)), co->out,
                 ": exists and is not empty; choose a new --out");
    BertConfig cfg = config_from_name_or_path(cfg_path);
    std::string vocab = co->vocab;
    if (vocab.empty() && file_exists(join_path(here.empty() ? "." : here, "vocab.txt")))
      vocab = join_path(here.empty() ? "." : here, "vocab.txt");
    std::optional<bool> lower;
    if (!vocab.empty()) {
      const Vocab v = Vocab::load(vocab);
      // NVIDIA's configs may carry the vocabulary size padded to a multiple of 8: vocab.txt's wins.
      if (v.size() < cfg.vocab_size && cfg.vocab_size % 8 == 0 && cfg.vocab_size - v.size() < 8)
        cfg.vocab_size = v.size();
      BERTCC_CHECK(v.size() <= cfg.vocab_size, vocab, ": ", v.size(), " entries, more than vocab_size ",
                   cfg.vocab_size);
      if (co->lower || co->no_lower) lower = co->lower;
    }
    // The head follows from the tensors present (each head's signature).
    const TorchCheckpoint ck(co->input);
    std::set<std::string> names;
    for (const auto& t : ck.tensors()) names.insert(canonical_param_name(t.name));
    const HeadSpec* found = head_by_tensors(names);
    const Heads heads = found ? found->id : Heads::None;
    if (found && found->needs_labels) {  // one label per row of the signature's first tensor
      const std::string& rows = found->signature.at(0).at(0);
      const std::vector<int64_t>* shape = nullptr;
      for (const auto& t : ck.tensors())
        if (canonical_param_name(t.name) == rows) shape = &t.shape;
      BERTCC_CHECK(shape->size() == 2 && (*shape)[0] > 0, co->input, ": ", rows, " is not a matrix");
      if (cfg.num_labels() != (*shape)[0]) {
        BERTCC_CHECK(cfg.id2label.empty(), cfg_path, ": ", cfg.num_labels(), " labels but ", rows, " has ", (*shape)[0],
                     " rows");
        for (int64_t i = 0; i < (*shape)[0]; ++i) cfg.id2label.push_back("LABEL_" + std::to_string(i));
      }
    }
    cfg.validate(cfg_path);
    Bert model(cfg, heads);
    load_weights(model, co->input);
    BERTCC_CHECK(!vocab.empty(), co->input,
                 ": no vocab.txt next to it; pass --vocab (a model directory carries "
                 "its vocabulary and tokenizer files: qa, classify, serve and finetune read them)");
    // Written to a temporary directory and renamed: nothing half-written on failure.
    const std::string tmp = co->out + ".tmp." + std::to_string(::getpid());
    fs::remove_all(tmp);
    try {
      save_model_dir(model, tmp, vocab, lower);
    } catch (...) {
      fs::remove_all(tmp);
      throw;
    }
    fs::remove(co->out);
    fs::rename(tmp, co->out);
    std::cout << "wrote " << co->out << " (" << architecture_name(heads) << ", " << ck.tensors().size()
              << " tensors read" << (ck.state_dict_key().empty() ? "" : " from '" + ck.state_dict_key() + "'") << ", "
              << model.table().total() << " parameters)\n";
  });
}

// bertcc export-onnx --model DIR --out model.onnx
void add_export_onnx(CLI::App& app) {
  struct OnnxOpts {
    std::string model, out, weights = "fp32", precision = "fp32";
  };
  auto oo = std::make_shared<OnnxOpts>();
  auto* ox = app.add_subcommand("export-onnx",
                                "Export a model directory to ONNX (opset 17; HF input/output names; dynamic batch and "
                                "sequence) for ONNX Runtime and Triton");
  ox->add_option("--model", oo->model, "model directory (the head follows config.json's architectures)")->required();
  ox->add_option(flag("--output", {"--out"}), oo->out, "ONNX file to write")->required();
  ox->add_option("--weights", oo->weights,
                 "weight precision in the file: fp32 (default) | fp16 | bf16 (computed in fp32)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  ox->add_option(
        "--precision", oo->precision,
        "fp32 (default) | int8: the encoder as --precision int8 computes it (the linear layers' int8 weights "
        "per output channel, activations quantized per row as bertcc rounds them, MatMulInteger; the attention's "
        "two products as MatMulInteger, its probabilities from bertcc's 8-bit exp table; the word embeddings "
        "8-bit per row)")
      ->check(CLI::IsMember({"fp32", "int8"}));
  add_int8_flags(ox,
                 "with --precision int8: the bits the file quantizes the linear layers' inputs to per row: 8 "
                 "([-127, 127]) or 7 ([-63, 63], what bertcc's auto takes on a CPU without VNNI or AVX-512); auto "
                 "(default): 8, whatever this machine is (the file runs elsewhere; ONNX Runtime's quantize_dynamic "
                 "default too)");
  ox->callback([oo]() {
    check_output_not_input(oo->out, "--output", oo->model, "--model");
    const auto model = load_model_dir(oo->model, architecture_heads(oo->model));
    const DType dt = oo->weights == "fp16" ? DType::F16 : oo->weights == "bf16" ? DType::BF16 : DType::F32;
    export_onnx(*model, oo->out, dt, oo->precision == "int8");
    std::cout << "wrote " << oo->out << " (" << model->architecture() << ", " << oo->weights << " weights"
              << (oo->precision == "int8"
                      ? ", int8 encoder, " + std::to_string(int8_export_activation_bits()) + "-bit activations"
                      : "")
              << ", " << std::filesystem::file_size(oo->out) << " bytes)\n";
  });
}

}  // namespace

void add_model_tools(CLI::App& app) {
  add_init_model(app);
  add_random_batch(app);
  add_convert(app);
  add_export_onnx(app);
}

}  // namespace bertcc::tools
