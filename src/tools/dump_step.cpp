// bertcc dump-step: one forward + backward of the pre-training loss on a whole HDF5 file,
// dropout off; writes losses and every parameter gradient (HF names) to safetensors.
#include <algorithm>
#include <iostream>

#include "bertcc/bert.h"
#include "bertcc/model_dir.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/runtime.h"
#include "bertcc/safetensors.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

void add_dump_step(CLI::App& app) {
  struct Opts {
    std::string model, batch, out, precision = "fp32";
    int threads = 0;
    int64_t rows = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("dump-step",
                                 "One pre-training forward+backward (dropout off) on an NVIDIA HDF5 batch; writes "
                                 "loss, mlm_loss, nsp_loss and grad.<HF name> tensors (F32 safetensors)");
  sub->add_option("--model", o->model, "Hugging Face model directory (config.json, model.safetensors)")->required();
  sub->add_option("--batch", o->batch, "HDF5 file in NVIDIA's pre-training layout; every row is one batch")
      ->required();
  sub->add_option("--out", o->out, "output .safetensors")->required();
  sub->add_option("--precision", o->precision, "fp32 | bf16")->check(CLI::IsMember({"fp32", "bf16"}));
  sub->add_option("--threads", o->threads, "threads (default: all cores)");
  sub->add_option("--rows", o->rows, "use only the first N rows (default: every row)")->check(CLI::PositiveNumber);
  sub->callback([o]() {
    set_threads(o->threads);
    const Precision prec = parse_precision(o->precision);
    std::cerr << describe_backend(prec == Precision::BF16) << "\n";
    auto model = load_model_dir(o->model, Heads::PreTraining);
    const PretrainShard shard = read_pretrain_shard(o->batch);
    const int64_t rows = o->rows > 0 ? std::min(o->rows, shard.N) : shard.N;
    BertBatch batch = make_pretrain_batch(shard, 0, rows, o->batch);
    batch.validate(model->config(), o->batch);
    Rng rng{0, 0};
    model->zero_grad();
    const PretrainLoss loss = model->pretrain_step(batch, /*training=*/false, /*backward=*/true, prec, rng);
    const float l[3] = {static_cast<float>(loss.loss), static_cast<float>(loss.mlm_loss),
                        static_cast<float>(loss.nsp_loss)};
    std::vector<StWrite> w{{"loss", {1}, &l[0]}, {"mlm_loss", {1}, &l[1]}, {"nsp_loss", {1}, &l[2]}};
    std::vector<std::string> names;
    names.reserve(model->table().entries().size());
    for (const auto& e : model->table().entries()) names.push_back("grad." + e.name);
    size_t i = 0;
    for (const auto& e : model->table().entries()) w.push_back({names[i++], e.shape, model->grads().data() + e.offset});
    write_safetensors(o->out, w);
    std::cout << "loss " << loss.loss << " mlm_loss " << loss.mlm_loss << " nsp_loss " << loss.nsp_loss
              << " (masked tokens " << loss.mlm_count << ", batch " << batch.B << "x" << batch.T << ") -> " << o->out
              << "\n";
  });
}

}  // namespace bertcc::tools
