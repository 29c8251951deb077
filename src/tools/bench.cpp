// bertcc bench train|squad|infer|electra: random data (or with --real, the features of a SQuAD or
// GLUE file), warm-up, timed steps. The last line is one JSON object.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/electra.h"
#include "bertcc/error.h"
#include "bertcc/features.h"
#include "bertcc/glue.h"
#include "bertcc/optim.h"
#include "bertcc/squad.h"
#include "bertcc/tokenizer.h"
#include "bertcc/runtime.h"
#include "kernels/gemm.h"
#include "kernels/gemm_int8.h"
#include "tools/cli_common.h"

namespace bertcc::tools {
namespace {

// Sequence r's real tokens: all T, or with --padding F for odd r T - floor(F T) (at least 2), the
// rest padding (id 0, mask 0), as batches padded to max_seq_length are.
int64_t real_length(int64_t r, int64_t T, double padding) {
  if (r % 2 == 0 || padding <= 0) return T;
  return std::max<int64_t>(2, T - static_cast<int64_t>(padding * static_cast<double>(T)));
}

BertBatch random_batch(const BertConfig& c, int64_t B, int64_t T, int64_t P, uint32_t seed, double padding) {
  std::mt19937 g(seed);
  BertBatch b;
  b.B = B;
  b.T = T;
  for (int64_t i = 0; i < B * T; ++i) {
    const int32_t id = 1 + static_cast<int32_t>(g() % static_cast<uint32_t>(c.vocab_size - 1));
    const bool real = i % T < real_length(i / T, T, padding);
    b.input_ids.push_back(real ? id : 0);
    b.input_mask.push_back(real ? 1 : 0);
    b.segment_ids.push_back(real && i % T >= T / 2 ? 1 : 0);
  }
  b.mlm_labels.assign(static_cast<size_t>(B * T), -1);
  for (int64_t r = 0; r < B; ++r) {
    const int64_t len = real_length(r, T, padding);
    for (int64_t k = 0; k < P; ++k) {
      const int64_t pos = 1 + static_cast<int64_t>(g() % static_cast<uint32_t>(len - 1));
      b.mlm_labels[static_cast<size_t>(r * T + pos)] = static_cast<int32_t>(g() % static_cast<uint32_t>(c.vocab_size));
    }
    b.nsp_labels.push_back(static_cast<int32_t>(g() % 2));
  }
  return b;
}

// --real: the features of a SQuAD .json (as finetune squad makes them: doc stride 128, questions
// of at most 64 tokens, the first answer's span) or of a GLUE task's .tsv (--task-name), at most
// T tokens each; "squad" takes them shuffled (seed 1), as fine-tuning does, "infer" in the file's
// order, as prediction does. Step k takes the next B (round the list), padded to their longest row
// as fine-tuning and prediction pad them (make_finetune_batch).
struct RealData {
  int64_t vocab_size = 0;  // --vocab's: the model's embedding table is made this size
  std::vector<FtFeature> features;
  std::vector<size_t> order;
  size_t next = 0;
};

RealData real_data(const std::string& path, const std::string& vocab_path, const std::string& lower,
                   const std::string& task, int64_t T, bool shuffled) {
  BERTCC_CHECK(!vocab_path.empty(), "bench --real: give --vocab (the vocabulary to tokenize ", path, " with)");
  const Vocab vocab = Vocab::load(vocab_path);
  BertTokenizer tok(vocab, lower.empty() ? vocab.looks_uncased() : parse_bool_flag("--do-lower-case", lower));
  RealData r;
  r.vocab_size = vocab.size();
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (json) {
    SquadFeatureOptions so;
    so.max_seq_length = static_cast<int>(T);
    r.features = squad_features(tok, read_squad(path, /*training=*/true), so, /*training=*/true).inputs;
  } else {
    BERTCC_CHECK(!task.empty(), "bench --real ", path, ": a .tsv needs --task-name (the GLUE task whose columns it has)");
    for (const GlueExample& e : read_glue(task, path))
      r.features.push_back(encode_pair(tok, e.text_a, e.text_b, static_cast<int>(T)));
  }
  BERTCC_CHECK(!r.features.empty(), "bench --real: ", path, " gave no features");
  r.order.resize(r.features.size());
  for (size_t i = 0; i < r.order.size(); ++i) r.order[i] = i;
  if (shuffled) std::shuffle(r.order.begin(), r.order.end(), std::mt19937_64(1));
  return r;
}

BertBatch next_real_batch(RealData& r, int64_t B, Heads heads, bool labels, int64_t T) {
  std::vector<size_t> idx;
  for (int64_t i = 0; i < B; ++i) {
    idx.push_back(r.order[r.next]);
    r.next = (r.next + 1) % r.order.size();
  }
  return make_finetune_batch(r.features, idx, heads, labels, T);
}

// The forward FLOPs of what the model computed for `b`: unpadded, each sequence's real tokens
// (the heads' masked positions as padded); padded, every row to b.T
double computed_forward_flops(const BertConfig& cfg, const BertBatch& b, bool unpadded, int64_t masked, bool heads,
                              int64_t* tokens) {
  double fwd = Bert::forward_flops(cfg, b.B, b.T, masked, heads);
  *tokens = b.B * b.T;
  if (!unpadded) return fwd;
  fwd -= Bert::forward_flops(cfg, b.B, b.T, 0, false);  // the heads alone
  *tokens = 0;
  for (int64_t r = 0; r < b.B; ++r) {
    int64_t len = 0;
    while (len < b.T && b.input_mask[static_cast<size_t>(r * b.T + len)] != 0) ++len;
    fwd += Bert::forward_flops(cfg, 1, len, 0, false);
    *tokens += len;
  }
  return fwd;
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

void add_bench(CLI::App& app) {
  struct Opts {
    std::string mode, config = "bert-base", precision = "auto", device = "cpu", real, vocab, lower, task;
    int64_t batch = 8, seq = 128, steps = 10, warmup = 2, max_pred = -1;
    double padding = 0.0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("bench", "Throughput on random data: train (pre-training forward+backward+LAMB), squad (BertForQuestionAnswering "
                                 "fine-tuning step: forward+backward+AdamW), infer (BertModel forward) or electra "
                                 "(ELECTRA pre-training step: generator, sampling, discriminator, LAMB over both)");
  sub->add_option("mode", o->mode, "train | squad | infer | electra")
      ->required()
      ->check(CLI::IsMember({"train", "squad", "infer", "electra"}));
  sub->add_option("--config", o->config,
                  "preset (bert-tiny, bert-mini, bert-small, bert-medium, bert-base, bert-large) or config path");
  sub->add_option(flag("--batch-size", {"--batch"}), o->batch, "sequences per step")->check(CLI::PositiveNumber);
  sub->add_option(flag("--max-seq-length", {"--seq"}), o->seq, "sequence length")->check(CLI::PositiveNumber);
  sub->add_option("--precision", o->precision,
                  "auto (default: bf16 on a GPU and on a CPU with AVX512-BF16 or AMX, fp32 on other CPUs) | fp32 | bf16 | fp16 (GEMM operands in fp16; no loss scaling in the timed step) | int8 (infer only: "
                  "dynamic quantization of the encoder's linear layers)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16", "int8"}));
  sub->add_option("--steps", o->steps, "timed steps")->check(CLI::PositiveNumber);
  sub->add_option("--warmup", o->warmup, "untimed warm-up steps");
  sub->add_option(flag("--max-predictions-per-seq"), o->max_pred, "masked positions per sequence (default seq*20/128)");
  sub->add_option("--padding", o->padding,
                  "fraction of every other sequence that is padding (mask 0), as batches padded to max_seq_length "
                  "(default 0: none)")
      ->check(CLI::Range(0.0, 0.99));
  sub->add_option("--real", o->real,
                  "real data instead of random (squad, infer): a SQuAD .json (its features, doc stride 128; squad "
                  "shuffles them as fine-tuning does, infer takes them in order as prediction does) or a GLUE "
                  ".tsv with --task-name; each step the next --batch-size, padded to their longest row")
      ->check(CLI::ExistingFile);
  sub->add_option("--vocab", o->vocab, "with --real: the vocabulary (vocab.txt)")->check(CLI::ExistingFile);
  sub->add_option(flag("--task-name"), o->task, "with --real FILE.tsv: the GLUE task (sst-2, mrpc, cola, ...)");
  add_casing_flags(sub, o->lower);
  sub->add_option("--threads", o->threads, "threads (default: all cores)")->check(threads_check());
  add_device_flags(sub, o->device);
  add_cuda_graphs_flag(sub);
  sub->callback([o]() {
    set_threads(o->threads);
    BERTCC_CHECK(!cuda_graphs() || o->mode == "infer", "bench ", o->mode,
                 ": --cuda-graphs records inference forwards only (bench infer)");
    // a shape's first forward runs unrecorded and its second is recorded: both before the timing
    BERTCC_CHECK(!cuda_graphs() || o->warmup >= 2, "bench infer --cuda-graphs: --warmup must be at least 2 "
                 "(the first forward runs unrecorded, the second records the graph)");
    const Precision prec = resolve_precision(o->precision, o->device == "cpu");
    BERTCC_CHECK(prec != Precision::I8 || o->mode == "infer", "bench ", o->mode,
                 ": --precision int8 is for inference (bench infer)");
    BertConfig cfg = config_from_name_or_path(o->config);
    const bool electra = o->mode == "electra";
    const bool train = o->mode == "train" || electra, squad = o->mode == "squad";
    BERTCC_CHECK(o->real.empty() || squad || o->mode == "infer", "bench ", o->mode,
                 ": --real is for squad and infer (pre-training reads no SQuAD or GLUE file)");
    BERTCC_CHECK(o->real.empty() || o->padding == 0.0, "bench: --padding is for random data; with --real the "
                 "padding is the real batches' own");
    RealData real;
    if (!o->real.empty()) real = real_data(o->real, o->vocab, o->lower, o->task, o->seq, /*shuffled=*/squad);
    // the real tokens' ids index the embedding table: it has --vocab's size (as pretrain --vocab sets
    // it), whatever the config says (a larger vocabulary than the config's read past it: exit 139)
    if (!o->real.empty()) cfg.vocab_size = static_cast<int>(real.vocab_size);
    const int64_t B = o->batch, T = o->seq;
    const int64_t P = o->max_pred > 0 ? o->max_pred : std::max<int64_t>(1, (T * 20 + 64) / 128);
    if (T > cfg.max_position_embeddings) cfg.max_position_embeddings = static_cast<int>(T);
    Backend& be = backend_for(o->device);
    const bool gpu = !be.on_host();
    std::cerr << (gpu ? be.describe() : describe_backend(prec)) << "\n";
    if (electra) cfg.model_type = "electra";
    Bert model(cfg, electra ? Heads::Discriminator : train ? Heads::PreTraining : squad ? Heads::QuestionAnswering : Heads::None);
    model.init_weights(1);
    // ELECTRA: Google's generator for this discriminator, sharing its embeddings.
    const BertConfig gcfg = electra_generator_config(cfg);
    std::unique_ptr<Bert> gen;
    if (electra) {
      gen = std::make_unique<Bert>(gcfg, Heads::Generator);
      gen->init_weights(2);
      electra_share_embeddings(model, *gen);
    }
    if (prec == Precision::I8) {
      BERTCC_CHECK(!gpu, "bench infer --precision int8 runs on the CPU only (--device cpu)");
      model.keep_int8_weights_only();  // as qa, classify and serve load a model for int8
    } else if (gpu && !train && !squad) {
      model.use_backend_for_inference(be, prec);  // as qa, classify and serve place a model
    } else if (gpu) {
      model.use_backend(be);
      if (gen) gen->use_backend(be);
    }
    OptimizerState ostate, gen_ostate;
    BertBatch batch = random_batch(cfg, B, T, train ? P : 0, 2, o->padding);
    for (int64_t r = 0; r < B; ++r) {  // answer spans for the QA head, inside the real tokens
      const int64_t len = real_length(r, T, o->padding);
      batch.start_positions.push_back(static_cast<int32_t>((r * 37) % len));
      batch.end_positions.push_back(static_cast<int32_t>(std::min<int64_t>(len - 1, (r * 37) % len + 3)));
    }
    AdamWOptions adamw;
    Rng rng{3, 0};
    LambOptions lamb;
    int64_t masked = 0;
    if (!o->real.empty()) batch = next_real_batch(real, B, squad ? Heads::QuestionAnswering : Heads::None, squad, T);
    // The optimizer through the backend whatever it is (the CPU backend calls the CPU optimizers).
    auto step = [&]() {
      if (electra) {
        model.zero_grad();
        gen->zero_grad();
        masked = electra_step(*gen, model, batch, true, true, prec, rng).masked;
        const double gn = be.global_norm(gen->grads_on_backend(), gen->table().total());
        const double dn = be.global_norm(model.grads_on_backend(), model.table().total());
        const double norm = std::sqrt(gn * gn + dn * dn);
        be.lamb_step(model.table(), model.params_on_backend(), model.grads_on_backend(), ostate, 1e-4f, lamb, norm);
        be.lamb_step(gen->table(), gen->params_on_backend(), gen->grads_on_backend(), gen_ostate, 1e-4f, lamb, norm);
        electra_share_embeddings(model, *gen);
      } else if (train) {
        model.zero_grad();
        masked = model.pretrain_step(batch, true, true, prec, rng).mlm_count;
        be.lamb_step(model.table(), model.params_on_backend(), model.grads_on_backend(), ostate, 1e-4f, lamb);
      } else if (squad) {
        model.zero_grad();
        model.finetune_step(batch, true, true, prec, rng);
        be.adamw_step(model.table(), model.params_on_backend(), model.grads_on_backend(), ostate, 3e-5f, adamw);
      } else {
        model.encode(batch, false, prec, rng, /*backward=*/false);
      }
      be.synchronize();
    };
    auto next = [&] {  // --real: the next batch (its making is not timed)
      if (!o->real.empty()) batch = next_real_batch(real, B, squad ? Heads::QuestionAnswering : Heads::None, squad, T);
    };
    for (int64_t i = 0; i < o->warmup; ++i) {
      step();
      next();
    }
    be.reset_peak_buffer_mb();  // as the peer resets PyTorch's peak after its warm-up
    std::vector<double> times;
    double fwd = 0;  // the timed steps' forward FLOPs, of what was computed
    int64_t tokens = 0, real_tokens = 0, padded_tokens = 0;
    for (int64_t i = 0; i < o->steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      int64_t t = 0;
      fwd += electra ? electra_forward_flops(cfg, gcfg, B, T, masked)
                     : computed_forward_flops(cfg, batch, model.last_packed(), train ? masked : 0, train, &t);
      tokens += electra ? B * T : t;
      for (int32_t m : batch.input_mask) real_tokens += m != 0;
      padded_tokens += batch.B * batch.T;
      next();
    }
    const double peak_buffers = be.peak_buffer_mb();  // before the GEMM probe allocates its operands
    double total = 0;
    for (double t : times) total += t;
    const double mean = total / static_cast<double>(times.size());
    // FLOPs of what was computed (computed_forward_flops), per timed step on average
    const bool unpadded = model.last_packed();
    const double flops = (train || squad ? 3.0 * fwd : fwd) / static_cast<double>(o->steps);
    const double probe = prec == Precision::I8
                             ? kernels::gemm_int8_probe_tops(B * T, cfg.intermediate_size, cfg.hidden_size, 5)
                             : be.gemm_probe_tflops(B * T, cfg.intermediate_size, cfg.hidden_size, prec, 5);
    nlohmann::ordered_json j;
    j["mode"] = o->mode;
    j["config"] = o->config;
    j["precision"] = precision_name(prec);
    j["batch"] = B;
    j["seq"] = T;
    if (o->padding > 0) j["padding"] = o->padding;
    if (!o->real.empty()) {  // the timed batches: their real tokens and their padded size, per step
      j["real"] = o->real;
      j["real_features"] = real.features.size();
      j["real_tokens"] = static_cast<double>(real_tokens) / static_cast<double>(o->steps);
      j["padded_tokens"] = static_cast<double>(padded_tokens) / static_cast<double>(o->steps);
    }
    j["unpadded"] = unpadded;
    j["tokens_computed"] = static_cast<double>(tokens) / static_cast<double>(o->steps);
    if (electra) j["generator_hidden_size"] = gcfg.hidden_size;
    j["threads"] = threads();
    j["steps"] = o->steps;
    j["step_ms"] = mean * 1e3;
    j["seq_per_s"] = static_cast<double>(B) / mean;
    j["model_tflops"] = flops / mean / 1e12;
    j["gemm_probe_tflops"] = probe;
    j["gemm_probe_shape"] = std::to_string(B * T) + "x" + std::to_string(cfg.intermediate_size) + "x" +
                            std::to_string(cfg.hidden_size);
    j["peak_rss_mb"] = peak_rss_mb();
    j["device"] = o->device;
    if (cuda_graphs()) j["cuda_graphs"] = true;
    if (be.kind() == DeviceKind::CUDA) {
      j["gpu"] = be.describe();
      // bertcc's own device buffers at their highest during the timed steps (PyTorch's
      // max_memory_allocated, which the peer reports), and the device's memory in use at the end
      // (cudaMemGetInfo: with the CUDA context and the libraries; the peer's torch.cuda.mem_get_info)
      j["peak_gpu_mem_mb"] = peak_buffers;
      j["gpu_mem_used_mb"] = be.device_memory_used_mb();
    } else if (!be.on_host()) {
      j["peak_buffer_mb"] = peak_buffers;  // cpu-staged: its allocations (the moments are host vectors there)
    }
    std::cout << o->mode << " " << o->config << " " << precision_name(prec) << " B=" << B << " S=" << T << ": "
              << j["seq_per_s"].get<double>() << " seq/s, " << j["model_tflops"].get<double>() << " TFLOP/s (GEMM probe "
              << probe << ")\n";
    std::cout << j.dump() << std::endl;
    const std::string prof = be.op_profile();
    if (!prof.empty()) std::cerr << prof;
  });
}

}  // namespace bertcc::tools
