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
#include "bertcc/runtime.h"
#include "bertcc/squad.h"
#include "bertcc/tokenizer.h"
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
    BERTCC_CHECK(!task.empty(), "bench --real ", path,
                 ": a .tsv needs --task-name (the GLUE task whose columns it has)");
    for (const GlueExample& e : read_glue(task, path))
      r.features.push_back(encode_pair(tok, e.text_a, e.text_b, static_cast<int>(T)));
  }
  BERTCC_CHECK(!r.features.empty(), "bench --real: ", path, " gave no features");
  r.order.resize(r.features.size());
  for (size_t i = 0; i < r.order.size(); ++i) r.order[i] = i;
  if (shuffled) std::shuffle(r.order.begin(), r.order.end(), std::mt19937_64(1));
  return r;
}

BertBatch next_real_batch(RealData& r, int64_t B, HeadLabels heads, bool labels, int64_t T) {
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

struct BenchOptions {
  std::string mode, config = "bert-base", precision = "auto", device = "cpu", real, vocab, lower, task;
  int64_t batch = 8, seq = 128, steps = 10, warmup = 2, max_pred = -1;
  double padding = 0.0;
  int threads = 0;
};

void add_bench_options(CLI::App* sub, BenchOptions& o) {
  sub->add_option("mode", o.mode, "train | squad | infer | electra")
      ->required()
      ->check(CLI::IsMember({"train", "squad", "infer", "electra"}));
  sub->add_option("--config", o.config,
                  "preset (bert-tiny, bert-mini, bert-small, bert-medium, bert-base, bert-large) or config path");
  sub->add_option(flag("--batch-size", {"--batch"}), o.batch, "sequences per step")
      ->check(in_range(1, kMaxBatch, "sequences held in memory at once"));
  sub->add_option(flag("--max-seq-length", {"--seq"}), o.seq, "sequence length")
      ->check(in_range(1, 1 << 20, "tokens per sequence"));
  sub->add_option("--precision", o.precision,
                  "auto (default: bf16 on a GPU and on a CPU with AVX512-BF16 or AMX, fp32 on other CPUs) | fp32 | "
                  "bf16 | fp16 (GEMM operands in fp16; no loss scaling in the timed step) | int8 (infer only: "
                  "dynamic quantization of the encoder's linear layers)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16", "int8"}));
  sub->add_option("--steps", o.steps, "timed steps")->check(in_range(1, 1e6, "steps"));
  sub->add_option("--warmup", o.warmup, "untimed warm-up steps")->check(in_range(0, 1e6, "steps"));
  sub->add_option(flag("--max-predictions-per-seq"), o.max_pred, "masked positions per sequence (default seq*20/128)")
      ->check(in_range(-1, 1 << 20, "masked positions per sequence, a buffer per row; -1 = the default"));
  sub->add_option("--padding", o.padding,
                  "fraction of every other sequence that is padding (mask 0), as batches padded to max_seq_length "
                  "(default 0: none)")
      ->check(in_range(0, 0.99, "a fraction of the sequence"));
  sub->add_option("--real", o.real,
                  "real data instead of random (squad, infer): a SQuAD .json (its features, doc stride 128; squad "
                  "shuffles them as fine-tuning does, infer takes them in order as prediction does) or a GLUE "
                  ".tsv with --task-name; each step the next --batch-size, padded to their longest row")
      ->check(CLI::ExistingFile);
  sub->add_option("--vocab", o.vocab, "with --real: the vocabulary (vocab.txt)")->check(CLI::ExistingFile);
  sub->add_option(flag("--task-name"), o.task, "with --real FILE.tsv: the GLUE task (sst-2, mrpc, cola, ...)");
  add_casing_flags(sub, o.lower);
  sub->add_option("--threads", o.threads, "threads (default: all cores)")->check(threads_check());
  add_device_flags(sub, o.device);
  add_cuda_graphs_flag(sub);
  add_int8_flags(sub);
}

void check_bench_options(const BenchOptions& o) {
  BERTCC_CHECK(!cuda_graphs() || o.mode == "infer", "bench ", o.mode,
               ": --cuda-graphs records inference forwards only (bench infer)");
  // a shape's first forward runs unrecorded and its second is recorded: both before the timing
  BERTCC_CHECK(!cuda_graphs() || o.warmup >= 2,
               "bench infer --cuda-graphs: --warmup must be at least 2 "
               "(the first forward runs unrecorded, the second records the graph)");
  BERTCC_CHECK(o.real.empty() || o.mode == "squad" || o.mode == "infer", "bench ", o.mode,
               ": --real is for squad and infer (pre-training reads no SQuAD or GLUE file)");
  BERTCC_CHECK(o.real.empty() || o.padding == 0.0,
               "bench: --padding is for random data; with --real the "
               "padding is the real batches' own");
}

// One bench run: the model (and ELECTRA's generator) on the backend, their optimizer states and
// the batch of the next step.
struct Bench {
  explicit Bench(const BenchOptions& opts) : o(opts) {}
  const BenchOptions& o;
  Precision prec = Precision::F32;
  BertConfig cfg, gcfg;
  bool electra = false, train = false, squad = false;
  int64_t B = 0, T = 0, P = 0;
  RealData real;
  Backend* be = nullptr;
  std::unique_ptr<Bert> model, gen;
  OptimizerState ostate, gen_ostate;
  BertBatch batch;
  AdamWOptions adamw;
  Rng rng{3, 0};
  LambOptions lamb;
  int64_t masked = 0;  // the last step's masked positions
};

// --real: the next batch (its making is not timed)
void next_batch(Bench& b) {
  if (!b.o.real.empty())
    b.batch = next_real_batch(b.real, b.B, b.squad ? HeadLabels::Span : HeadLabels::None, b.squad, b.T);
}

// The models, placed on the backend, and the first batch
void set_up(Bench& b) {
  const BenchOptions& o = b.o;
  b.prec = resolve_precision(o.precision, o.device == "cpu");
  BERTCC_CHECK(b.prec != Precision::I8 || o.mode == "infer", "bench ", o.mode,
               ": --precision int8 is for inference (bench infer)");
  b.cfg = config_from_name_or_path(o.config);
  b.electra = o.mode == "electra";
  b.train = o.mode == "train" || b.electra;
  b.squad = o.mode == "squad";
  if (!o.real.empty()) b.real = real_data(o.real, o.vocab, o.lower, o.task, o.seq, /*shuffled=*/b.squad);
  // the real tokens' ids index the embedding table: it has --vocab's size (as pretrain --vocab sets
  // it), whatever the config says (a larger vocabulary than the config's read past it: exit 139)
  if (!o.real.empty()) b.cfg.vocab_size = static_cast<int>(b.real.vocab_size);
  b.B = o.batch;
  b.T = o.seq;
  b.P = o.max_pred > 0 ? o.max_pred : std::max<int64_t>(1, (b.T * 20 + 64) / 128);
  if (b.T > b.cfg.max_position_embeddings) b.cfg.max_position_embeddings = static_cast<int>(b.T);
  Backend& be = backend_for(o.device);
  b.be = &be;
  const bool gpu = !be.on_host();
  std::cerr << (gpu ? be.describe() : describe_backend(b.prec)) << "\n";
  if (b.electra) b.cfg.model_type = "electra";
  b.model = std::make_unique<Bert>(b.cfg, b.electra ? Heads::Discriminator
                                          : b.train ? Heads::PreTraining
                                          : b.squad ? Heads::QuestionAnswering
                                                    : Heads::None);
  b.model->init_weights(1);
  // ELECTRA: Google's generator for this discriminator, sharing its embeddings.
  b.gcfg = electra_generator_config(b.cfg);
  if (b.electra) {
    b.gen = std::make_unique<Bert>(b.gcfg, Heads::Generator);
    b.gen->init_weights(2);
    electra_share_embeddings(*b.model, *b.gen);
  }
  if (b.prec == Precision::I8) {
    BERTCC_CHECK(!gpu, "bench infer --precision int8 runs on the CPU only (--device cpu)");
    b.model->keep_int8_weights_only();  // as qa, classify and serve load a model for int8
  } else if (!gpu && (b.prec == Precision::F32 || b.prec == Precision::BF16) && !b.train && !b.squad && !b.electra) {
    b.model->keep_packed_weights_only(b.prec);  // as qa, classify and serve load a model for fp32 or bf16
  } else if (gpu && !b.train && !b.squad) {
    b.model->use_backend_for_inference(be, b.prec);  // as qa, classify and serve place a model
  } else if (gpu) {
    b.model->use_backend(be);
    if (b.gen) b.gen->use_backend(be);
  }
  b.batch = random_batch(b.cfg, b.B, b.T, b.train ? b.P : 0, 2, o.padding);
  for (int64_t r = 0; r < b.B; ++r) {  // answer spans for the QA head, inside the real tokens
    const int64_t len = real_length(r, b.T, o.padding);
    b.batch.start_positions.push_back(static_cast<int32_t>((r * 37) % len));
    b.batch.end_positions.push_back(static_cast<int32_t>(std::min<int64_t>(len - 1, (r * 37) % len + 3)));
  }
  if (!o.real.empty()) next_batch(b);
}

// The step of each mode, with the optimizer through the backend whatever it is (the CPU backend
// calls the CPU optimizers).
void electra_pretrain_step(Bench& b) {
  Bert &model = *b.model, &gen = *b.gen;
  Backend& be = *b.be;
  model.zero_grad();
  gen.zero_grad();
  b.masked = electra_step(gen, model, b.batch, b.rng,
                          ElectraStepOptions{.training = true, .backward = true, .precision = b.prec})
                 .masked;
  const double gn = be.global_norm(gen.grads_on_backend(), gen.table().total());
  const double dn = be.global_norm(model.grads_on_backend(), model.table().total());
  const double norm = std::sqrt(gn * gn + dn * dn);
  be.lamb_step(model.table(), model.params_on_backend(), model.grads_on_backend(), b.ostate, 1e-4f, b.lamb, norm);
  be.lamb_step(gen.table(), gen.params_on_backend(), gen.grads_on_backend(), b.gen_ostate, 1e-4f, b.lamb, norm);
  electra_share_embeddings(model, gen);
}

void pretrain_step(Bench& b) {
  Bert& model = *b.model;
  model.zero_grad();
  b.masked =
      model.pretrain_step(b.batch, b.rng, StepArgs{.training = true, .backward = true, .precision = b.prec}).mlm_count;
  b.be->lamb_step(model.table(), model.params_on_backend(), model.grads_on_backend(), b.ostate, 1e-4f, b.lamb);
}

void squad_step(Bench& b) {
  Bert& model = *b.model;
  model.zero_grad();
  model.finetune_step(b.batch, b.rng, StepArgs{.training = true, .backward = true, .precision = b.prec});
  b.be->adamw_step(model.table(), model.params_on_backend(), model.grads_on_backend(), b.ostate, 3e-5f, b.adamw);
}

void infer_step(Bench& b) { b.model->encode(b.batch, false, b.prec, b.rng, /*backward=*/false); }

// What the timed steps did
struct Timing {
  std::vector<double> times;
  double fwd = 0;  // the timed steps' forward FLOPs, of what was computed
  int64_t tokens = 0, real_tokens = 0, padded_tokens = 0;
  double peak_buffers = 0;
};

Timing time_steps(Bench& b) {
  void (*step_of_mode)(Bench&) = b.electra ? electra_pretrain_step
                                 : b.train ? pretrain_step
                                 : b.squad ? squad_step
                                           : infer_step;
  auto step = [&] {
    step_of_mode(b);
    b.be->synchronize();
  };
  for (int64_t i = 0; i < b.o.warmup; ++i) {
    step();
    next_batch(b);
  }
  b.be->reset_peak_buffer_mb();  // as the peer resets PyTorch's peak after its warm-up
  Timing t;
  for (int64_t i = 0; i < b.o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    t.times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    int64_t n = 0;
    t.fwd += b.electra
                 ? electra_forward_flops(b.cfg, b.gcfg, b.B, b.T, b.masked)
                 : computed_forward_flops(b.cfg, b.batch, b.model->last_packed(), b.train ? b.masked : 0, b.train, &n);
    t.tokens += b.electra ? b.B * b.T : n;
    for (int32_t m : b.batch.input_mask) t.real_tokens += m != 0;
    t.padded_tokens += b.batch.B * b.batch.T;
    next_batch(b);
  }
  t.peak_buffers = b.be->peak_buffer_mb();  // before the GEMM probe allocates its operands
  return t;
}

// The results line and the JSON record
void report(const Bench& b, const Timing& t) {
  const BenchOptions& o = b.o;
  Backend& be = *b.be;
  const int64_t B = b.B, T = b.T;
  double total = 0;
  for (double x : t.times) total += x;
  const double mean = total / static_cast<double>(t.times.size());
  // FLOPs of what was computed (computed_forward_flops), per timed step on average
  const bool unpadded = b.model->last_packed();
  const double flops = (b.train || b.squad ? 3.0 * t.fwd : t.fwd) / static_cast<double>(o.steps);
  const double probe = b.prec == Precision::I8
                           ? kernels::gemm_int8_probe_tops(B * T, b.cfg.intermediate_size, b.cfg.hidden_size, 5,
                                                           int8_activation_max(int8_activation_bits()))
                           : be.gemm_probe_tflops(B * T, b.cfg.intermediate_size, b.cfg.hidden_size, b.prec, 5);
  nlohmann::ordered_json j;
  j["mode"] = o.mode;
  j["config"] = o.config;
  j["precision"] = precision_name(b.prec);
  if (b.prec == Precision::I8) j["int8_activation_bits"] = int8_activation_bits();
  j["batch"] = B;
  j["seq"] = T;
  if (o.padding > 0) j["padding"] = o.padding;
  if (!o.real.empty()) {  // the timed batches: their real tokens and their padded size, per step
    j["real"] = o.real;
    j["real_features"] = b.real.features.size();
    j["real_tokens"] = static_cast<double>(t.real_tokens) / static_cast<double>(o.steps);
    j["padded_tokens"] = static_cast<double>(t.padded_tokens) / static_cast<double>(o.steps);
  }
  j["unpadded"] = unpadded;
  j["tokens_computed"] = static_cast<double>(t.tokens) / static_cast<double>(o.steps);
  if (b.electra) j["generator_hidden_size"] = b.gcfg.hidden_size;
  j["threads"] = threads();
  j["steps"] = o.steps;
  j["step_ms"] = mean * 1e3;
  j["seq_per_s"] = static_cast<double>(B) / mean;
  j["model_tflops"] = flops / mean / 1e12;
  j["gemm_probe_tflops"] = probe;
  j["gemm_probe_shape"] =
      std::to_string(B * T) + "x" + std::to_string(b.cfg.intermediate_size) + "x" + std::to_string(b.cfg.hidden_size);
  j["peak_rss_mb"] = peak_rss_mb();
  j["device"] = o.device;
  if (cuda_graphs()) j["cuda_graphs"] = true;
  if (be.kind() == DeviceKind::CUDA) {
    j["gpu"] = be.describe();
    // bertcc's own device buffers at their highest during the timed steps (PyTorch's
    // max_memory_allocated, which the peer reports), and the device's memory in use at the end
    // (cudaMemGetInfo: with the CUDA context and the libraries; the peer's torch.cuda.mem_get_info)
    j["peak_gpu_mem_mb"] = t.peak_buffers;
    j["gpu_mem_used_mb"] = be.device_memory_used_mb();
  } else if (!be.on_host()) {
    j["peak_buffer_mb"] = t.peak_buffers;  // cpu-staged: its allocations (the moments are host vectors there)
  }
  std::cout << o.mode << " " << o.config << " " << precision_name(b.prec) << " B=" << B << " S=" << T << ": "
            << j["seq_per_s"].get<double>() << " seq/s, " << j["model_tflops"].get<double>() << " TFLOP/s (GEMM probe "
            << probe << ")\n";
  std::cout << j.dump() << std::endl;
  const std::string prof = be.op_profile();
  if (!prof.empty()) std::cerr << prof;
}

}  // namespace

void add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* sub = app.add_subcommand(
      "bench",
      "Throughput on random data: train (pre-training forward+backward+LAMB), squad (BertForQuestionAnswering "
      "fine-tuning step: forward+backward+AdamW), infer (BertModel forward) or electra "
      "(ELECTRA pre-training step: generator, sampling, discriminator, LAMB over both)");
  add_bench_options(sub, *o);
  sub->callback([o]() {
    set_threads(o->threads);
    check_bench_options(*o);
    Bench b(*o);
    set_up(b);
    const Timing t = time_steps(b);
    report(b, t);
  });
}

}  // namespace bertcc::tools
