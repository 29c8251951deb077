// bertcc dump-step: one forward + backward of the pre-training loss on a whole HDF5 file,
// dropout off; writes losses and every parameter gradient (HF names) to safetensors.
#include <algorithm>
#include <iostream>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/electra.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/model_dir.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/runtime.h"
#include "bertcc/safetensors.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

namespace {
struct DumpOpts {
  double loss_scale = 1.0;
  std::string model, batch, out, precision = "fp32", head = "pretraining", model_type = "bert", generator;
  std::string device = "cpu";
  int threads = 0;
  int64_t rows = 0;
};

// --head: every head's serialized name but the encoder's ("pretraining" is the HDF5 batch's).
std::vector<std::string> head_names() {
  std::vector<std::string> v;
  for (const HeadSpec* s : head_registry())
    if (s->labels != HeadLabels::None) v.push_back(s->name);
  return v;
}

std::vector<int32_t> int_tensor(const SafetensorsFile& f, const std::string& name, std::vector<int64_t>* shape) {
  const StTensor* t = f.find(name);
  if (!t) return {};
  std::vector<float> v(t->numel());
  f.read_f32(*t, v.data());
  if (shape) *shape = t->shape;
  std::vector<int32_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<int32_t>(v[i]);
  return r;
}

// A model's gradient tensors under HF's names ("grad." + prefix + name; ELECTRA's encoder is electra.*).
void add_grads(const Bert& m, const std::string& prefix, std::vector<StWrite>& w) {
  const bool electra = m.config().electra();
  auto& mm = const_cast<Bert&>(m);
  for (const auto& e : m.table().entries())
    w.push_back({"grad." + prefix + (electra && e.name.rfind("bert.", 0) == 0 ? "electra." + e.name.substr(5) : e.name),
                 e.shape, mm.grads().data() + e.offset});
}

// The token tensors of a .safetensors batch: input_ids [B,T] (required), segment_ids, input_mask.
BertBatch read_token_batch(const SafetensorsFile& f, const std::string& path) {
  BertBatch batch;
  std::vector<int64_t> shape;
  batch.input_ids = int_tensor(f, "input_ids", &shape);
  BERTCC_CHECK(shape.size() == 2, path, ": tensor 'input_ids' must be [B,T]");
  batch.B = shape[0];
  batch.T = shape[1];
  batch.segment_ids = int_tensor(f, "segment_ids", nullptr);
  batch.input_mask = int_tensor(f, "input_mask", nullptr);
  return batch;
}

// ELECTRA: generator + discriminator on one batch (.safetensors: input_ids already masked,
// segment_ids, input_mask, mlm_labels [B,T] with -100 where not masked, gumbel [masked, vocab]).
void dump_electra_step(const DumpOpts& o, Precision prec) {
  BERTCC_CHECK(!o.generator.empty(),
               "dump-step --model-type electra needs --generator DIR (and --model = the discriminator)");
  auto disc = load_model_dir(o.model, Heads::Discriminator);
  auto gen = load_model_dir(o.generator, Heads::Generator);
  SafetensorsFile f(o.batch);
  BertBatch batch = read_token_batch(f, o.batch);
  batch.mlm_labels = int_tensor(f, "mlm_labels", nullptr);
  BERTCC_CHECK(batch.mlm_labels.size() == batch.input_ids.size(), o.batch, ": tensor 'mlm_labels' must be [B,T]");
  for (auto& y : batch.mlm_labels) y = y == -100 ? -1 : y;
  batch.validate(disc->config(), o.batch);
  std::vector<float> gumbel;
  const std::vector<float>* noise = nullptr;
  if (const StTensor* t = f.find("gumbel")) {
    gumbel.resize(t->numel());
    f.read_f32(*t, gumbel.data());
    noise = &gumbel;
  }
  electra_share_embeddings(*disc, *gen);
  if (o.device != "cpu") {
    Backend& be = backend_for(o.device);
    disc->use_backend(be);
    gen->use_backend(be);
  }
  Rng rng{0, 0};
  gen->zero_grad();
  disc->zero_grad();
  std::vector<int32_t> sampled;
  const ElectraLoss l =
      electra_step(*gen, *disc, batch, rng,
                   ElectraStepOptions{.backward = true, .precision = prec, .gumbel = noise, .sampled = &sampled});
  gen->grads_to_host();
  disc->grads_to_host();
  const float losses[3] = {static_cast<float>(l.loss), static_cast<float>(l.gen_loss), static_cast<float>(l.disc_loss)};
  std::vector<float> sampled_f(sampled.begin(), sampled.end());
  std::vector<StWrite> w{{"loss", {1}, &losses[0]},
                         {"generator_loss", {1}, &losses[1]},
                         {"discriminator_loss", {1}, &losses[2]},
                         {"sampled", {static_cast<int64_t>(sampled_f.size())}, sampled_f.data()},
                         {"discriminator_logits", {batch.B, batch.T}, disc->head_logits().data()}};
  add_grads(*gen, "generator.", w);
  add_grads(*disc, "discriminator.", w);
  write_safetensors(o.out, w);
  std::cout << "ELECTRA loss " << l.loss << " = generator " << l.gen_loss << " + 50 x discriminator " << l.disc_loss
            << " (masked " << l.masked << ", replaced " << l.replaced << " of " << l.tokens << " tokens) -> " << o.out
            << "\n";
}

void dump_head_step(const DumpOpts& o, Precision prec) {
  const HeadSpec* spec = head_by_name(o.head);
  BERTCC_CHECK(spec, "dump-step: no head '", o.head, "'");
  const bool masked_lm = spec->labels == HeadLabels::MaskedLm;  // ELECTRA's generator
  auto model = load_model_dir(o.model, spec->id);
  SafetensorsFile f(o.batch);
  BertBatch batch = read_token_batch(f, o.batch);
  batch.labels = int_tensor(f, "labels", nullptr);
  batch.start_positions = int_tensor(f, "start_positions", nullptr);
  batch.end_positions = int_tensor(f, "end_positions", nullptr);
  if (const StTensor* t = f.find("targets")) {
    batch.targets.resize(t->numel());
    f.read_f32(*t, batch.targets.data());
  }
  if (masked_lm) {  // masked-LM labels: token ids, -100 (HF) = not predicted
    batch.mlm_labels = batch.labels;
    for (auto& y : batch.mlm_labels) y = y == -100 ? -1 : y;
    batch.labels.clear();
  }
  batch.validate(model->config(), o.batch);
  Rng rng{0, 0};
  model->zero_grad();
  if (o.device != "cpu") model->use_backend(backend_for(o.device));
  if (masked_lm) {
    std::vector<float> lg;  // the logits before backward overwrites them with their gradient
    const PretrainLoss pl =
        model->pretrain_step(batch, rng, StepArgs{.backward = true, .precision = prec, .mlm_logits = &lg});
    model->grads_to_host();
    const float l = static_cast<float>(pl.loss);
    std::vector<StWrite> w{{"loss", {1}, &l}, {"logits", {pl.mlm_count, model->config().vocab_size}, lg.data()}};
    add_grads(*model, "", w);
    write_safetensors(o.out, w);
    std::cout << "ElectraForMaskedLM loss " << pl.loss << " (masked tokens " << pl.mlm_count << ", batch " << batch.B
              << "x" << batch.T << ") -> " << o.out << "\n";
    return;
  }
  const FinetuneLoss loss = model->finetune_step(batch, rng, StepArgs{.backward = true, .precision = prec});
  model->grads_to_host();
  const float l = static_cast<float>(loss.loss);
  if (spec->beam_search) {
    // training-form logits (end and class given the true start), gradients, then the beam search
    // of a forward pass without positions
    const std::vector<float> lg = model->head_logits();
    const int64_t N = batch.B * batch.T;
    std::vector<StWrite> w{{"loss", {1}, &l},
                           {"start_logits", {batch.B, batch.T}, lg.data()},
                           {"end_logits", {batch.B, batch.T}, lg.data() + N},
                           {"cls_logits", {batch.B}, lg.data() + 2 * N}};
    add_grads(*model, "", w);
    BertBatch fwd = batch;
    fwd.start_positions.clear();
    fwd.end_positions.clear();
    model->finetune_step(fwd, rng, StepArgs{.precision = prec});
    const std::vector<float> beam = model->head_logits();
    w.push_back({"beam", {batch.B, joint_qa_output_size(model->config())}, beam.data()});
    write_safetensors(o.out, w);
    std::cout << model->architecture() << " loss " << loss.loss << " (batch " << batch.B << "x" << batch.T << ") -> "
              << o.out << "\n";
    return;
  }
  const auto& logits = model->head_logits();
  const bool per_row = spec->labels == HeadLabels::Sequence;
  const int64_t K = static_cast<int64_t>(logits.size()) / (per_row ? batch.B : batch.B * batch.T);
  std::vector<int64_t> lshape = per_row ? std::vector<int64_t>{batch.B, K} : std::vector<int64_t>{batch.B, batch.T, K};
  std::vector<StWrite> w{{"loss", {1}, &l}, {"logits", lshape, logits.data()}};
  add_grads(*model, "", w);
  write_safetensors(o.out, w);
  std::cout << model->architecture() << " loss " << loss.loss << " (batch " << batch.B << "x" << batch.T << ") -> "
            << o.out << "\n";
}
}  // namespace

void add_dump_step(CLI::App& app) {
  using Opts = DumpOpts;
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("dump-step",
                                 "One pre-training forward+backward (dropout off) on an NVIDIA HDF5 batch; writes "
                                 "loss, mlm_loss, nsp_loss and grad.<HF name> tensors (F32 safetensors)");
  sub->add_option("--model", o->model, "Hugging Face model directory (config.json, model.safetensors)")->required();
  sub->add_option(flag("--input", {"--batch"}), o->batch,
                  "HDF5 file in NVIDIA's pre-training layout; every row is one batch")
      ->required();
  sub->add_option(flag("--output", {"--out"}), o->out, "output .safetensors")->required();
  sub->add_option("--precision", o->precision, "fp32 | bf16 | fp16 (GEMM operands rounded to fp16, no loss scale)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  sub->add_option("--threads", o->threads, "threads (default: all cores)")->check(threads_check());
  sub->add_option(
         "--head", o->head,
         "pretraining (HDF5 batch) | qa | qa-joint | classify | token | discriminator | generator (ELECTRA): the "
         "others read a "
         ".safetensors batch (F32 input_ids, segment_ids, input_mask [B,T] and labels [B] or [B,T] "
         "(discriminator: 1 = replaced; generator: token ids, -100 = not masked), targets [B], or "
         "start_positions/end_positions [B]) and also write the logits (generator: of the masked tokens; "
         "qa-joint: start_logits, end_logits, cls_logits and the beam search's output, beam)")
      ->check(CLI::IsMember(head_names()));
  sub->add_option(flag("--model-type"), o->model_type,
                  "bert (default) | electra: --model is the discriminator, --generator the generator; the batch is a "
                  ".safetensors file (input_ids already masked, segment_ids, input_mask, mlm_labels [B,T] with -100 "
                  "where not masked, optional gumbel [masked, vocab]); writes loss, generator_loss, "
                  "discriminator_loss, sampled, discriminator_logits and grad.generator.* / grad.discriminator.* "
                  "(shared embeddings under the discriminator)")
      ->check(CLI::IsMember({"bert", "electra"}));
  sub->add_option("--generator", o->generator, "ELECTRA generator directory (ElectraForMaskedLM)");
  add_device_flags(sub, o->device);
  sub->add_option(flag("--loss-scale"), o->loss_scale,
                  "pre-training: multiply the loss by S before backward and divide the gradients by S after (fp16's "
                  "loss scaling, keeping small gradients above fp16's underflow; default 1)")
      ->check(in_range(0, kFloatMax, "a loss scale", true));
  sub->add_option("--rows", o->rows, "use only the first N rows (default: every row)")
      ->check(in_range(1, kMaxBatch, "rows, one batch held in memory"));
  sub->callback([o]() {
    check_output_not_input(o->out, "--output", o->model, "--model");
    check_output_not_input(o->out, "--output", o->batch, "--input");
    set_threads(o->threads);
    // padded, as the PyTorch checks it is compared with compute (the padding's hidden states too:
    // Hugging Face's QA loss takes the padded positions)
    set_padded_execution(true);
    const Precision prec = parse_precision(o->precision);
    Backend& be = backend_for(o->device);  // (on the CPU it says if --allow-tf32 is moot)
    std::cerr << (o->device == "cpu" ? describe_backend(prec == Precision::BF16) : be.describe()) << "\n";
    BERTCC_CHECK(o->loss_scale == 1.0 || (o->model_type != "electra" && o->head == "pretraining"),
                 "dump-step: --loss-scale applies to BERT's pre-training head only");
    if (o->model_type == "electra") return dump_electra_step(*o, prec);
    if (o->head != "pretraining") return dump_head_step(*o, prec);
    auto model = load_model_dir(o->model, Heads::PreTraining);
    const PretrainShard shard = read_pretrain_shard(o->batch);
    const int64_t rows = o->rows > 0 ? std::min(o->rows, shard.N) : shard.N;
    BertBatch batch = make_pretrain_batch(shard, 0, rows, o->batch);
    batch.validate(model->config(), o->batch);
    if (o->device != "cpu") model->use_backend(be);
    Rng rng{0, 0};
    model->zero_grad();
    const auto scale = static_cast<float>(o->loss_scale);
    const PretrainLoss loss =
        model->pretrain_step(batch, rng, StepArgs{.backward = true, .precision = prec, .loss_scale = scale});
    model->grads_to_host();
    if (scale != 1.0f)  // unscaled as the trainer unscales them (the reported losses are never scaled)
      for (float& g : model->grads()) g /= scale;
    const float l[3] = {static_cast<float>(loss.loss), static_cast<float>(loss.mlm_loss),
                        static_cast<float>(loss.nsp_loss)};
    std::vector<StWrite> w{{"loss", {1}, &l[0]}, {"mlm_loss", {1}, &l[1]}, {"nsp_loss", {1}, &l[2]}};
    add_grads(*model, "", w);
    write_safetensors(o->out, w);
    std::cout << "loss " << loss.loss << " mlm_loss " << loss.mlm_loss << " nsp_loss " << loss.nsp_loss
              << " (masked tokens " << loss.mlm_count << ", batch " << batch.B << "x" << batch.T << ") -> " << o->out
              << "\n";
  });
}

}  // namespace bertcc::tools
