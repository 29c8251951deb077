#include "bertcc/model_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/safetensors.h"
#include "bertcc/torch_checkpoint.h"

namespace bertcc {

static bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// A head's tensor (HeadSpec::prefixes) or the pooler's.
static bool is_head_tensor(const std::string& n) {
  if (n.rfind("bert.pooler.", 0) == 0) return true;
  for (const HeadSpec* s : head_registry())
    for (const std::string& p : s->prefixes)
      if (n.rfind(p, 0) == 0) return true;
  return false;
}

std::string canonical_param_name(const std::string& stored) {
  std::string n = stored;
  while (n.rfind("module.", 0) == 0) n.erase(0, 7);  // DistributedDataParallel's wrapper
  // NVIDIA DeepLearningExamples fuses bias and activation in LinearActivation, named dense_act.
  for (size_t p; (p = n.find(".dense_act.")) != std::string::npos;) n.replace(p, 11, ".dense.");
  if (ends_with(n, "position_ids")) return "";                // a buffer, not a parameter
  if (n.rfind("electra.", 0) == 0) n.replace(0, 8, "bert.");  // ELECTRA's encoder: the same internal names
  if (n.rfind("bert.", 0) != 0 && !is_head_tensor(n)) n.insert(0, "bert.");  // BertModel / ElectraModel checkpoints
  if (ends_with(n, "LayerNorm.gamma")) n = n.substr(0, n.size() - 5) + "weight";
  if (ends_with(n, "LayerNorm.beta")) n = n.substr(0, n.size() - 4) + "bias";
  return n;
}

static std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

namespace {
// A tensor of a checkpoint, whatever its file format.
struct SourceTensor {
  std::string name;  // as stored
  std::vector<int64_t> shape;
  std::function<void(float*)> read;  // fp32, row-major
};

// NVIDIA's BERT pads the vocabulary to a multiple of 8: those extra rows of the word embeddings and
// the MLM bias are dropped when the model's vocab_size is the unpadded one.
bool padded_vocab_rows(const std::string& name, const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
  if (name != "bert.embeddings.word_embeddings.weight" && name != "cls.predictions.bias" &&
      name != "cls.predictions.decoder.bias")
    return false;
  if (got.size() != want.size() || got.empty() || got[0] <= want[0] || got[0] % 8 != 0 || got[0] - want[0] >= 8)
    return false;
  return std::equal(got.begin() + 1, got.end(), want.begin() + 1);
}

void read_rows(const SourceTensor& t, const std::vector<int64_t>& want, float* dst) {
  int64_t n = 1, row = 1;
  for (int64_t d : t.shape) n *= d;
  for (size_t d = 1; d < want.size(); ++d) row *= want[d];
  std::vector<float> all(static_cast<size_t>(n));
  t.read(all.data());
  std::copy(all.begin(), all.begin() + want[0] * row, dst);
}

void load_tensors(Bert& model, const std::vector<SourceTensor>& tensors, const std::string& path, bool new_heads) {
  const ParamTable& table = model.table();
  std::set<std::string> loaded;
  const SourceTensor* decoder_bias = nullptr;
  int skipped_heads = 0, trimmed = 0;
  std::vector<std::string> skipped;
  for (const auto& t : tensors) {
    const std::string name = canonical_param_name(t.name);
    if (name.empty()) continue;
    if (name == "cls.predictions.decoder.weight") {  // tied to the word embeddings
      const auto& wte = table.at("bert.embeddings.word_embeddings.weight");
      BERTCC_CHECK(
          t.shape == wte.shape || padded_vocab_rows("bert.embeddings.word_embeddings.weight", t.shape, wte.shape), path,
          ": tensor '", t.name, "' has shape ", shape_str(t.shape), ", expected ", shape_str(wte.shape),
          " (tied to the word embeddings)");
      continue;
    }
    if (name == "cls.predictions.decoder.bias") {
      decoder_bias = &t;
      continue;
    }
    const ParamEntry* e = table.find(name);
    // Tensors of another head (pre-training heads, pooler, a classifier) are not used, as HF does.
    // When starting a fine-tuning run, a head of another size is re-initialised (HF's
    // ignore_mismatched_sizes).
    if ((!e && is_head_tensor(name)) || (e && new_heads && is_head_tensor(name) && t.shape != e->shape)) {
      ++skipped_heads;
      if (skipped.size() < 4) skipped.push_back(name);
      continue;
    }
    BERTCC_CHECK(e, path, ": unknown tensor '", t.name, "' (not a parameter of this BERT model)");
    const bool trim = padded_vocab_rows(name, t.shape, e->shape);
    BERTCC_CHECK(t.shape == e->shape || trim, path, ": tensor '", t.name, "' has shape ", shape_str(t.shape),
                 ", expected ", shape_str(e->shape));
    BERTCC_CHECK(!loaded.count(name), path, ": tensor '", name, "' appears twice (e.g. as gamma and weight)");
    if (trim) {
      read_rows(t, e->shape, model.params().data() + e->offset);
      ++trimmed;
    } else {
      t.read(model.params().data() + e->offset);
    }
    model.tensor_written(table.find_ref(name));  // a load for inference: quantized or packed now
    loaded.insert(name);
  }
  if (decoder_bias && table.find("cls.predictions.bias") && !loaded.count("cls.predictions.bias")) {
    const ParamEntry& e = table.at("cls.predictions.bias");
    const bool trim = padded_vocab_rows("cls.predictions.decoder.bias", decoder_bias->shape, e.shape);
    BERTCC_CHECK(decoder_bias->shape == e.shape || trim, path, ": tensor 'cls.predictions.decoder.bias' has shape ",
                 shape_str(decoder_bias->shape), ", expected ", shape_str(e.shape));
    if (trim)
      read_rows(*decoder_bias, e.shape, model.params().data() + e.offset);
    else
      decoder_bias->read(model.params().data() + e.offset);
    loaded.insert("cls.predictions.bias");
  }
  std::vector<std::string> fresh;
  for (const auto& e : table.entries()) {
    if (loaded.count(e.name)) continue;
    BERTCC_CHECK(new_heads && is_head_tensor(e.name), path, ": missing tensor '", e.name, "'");
    fresh.push_back(e.name);
  }
  if (trimmed)
    std::cerr << "note: " << path << ": vocabulary padded to a multiple of 8 (NVIDIA's layout) trimmed to vocab_size "
              << model.config().vocab_size << "\n";
  if (skipped_heads) {
    std::cerr << "note: " << path << ": " << skipped_heads << " head tensors not used by " << model.architecture()
              << " (";
    for (size_t i = 0; i < skipped.size(); ++i) std::cerr << (i ? ", " : "") << skipped[i];
    std::cerr << (size_t(skipped_heads) > skipped.size() ? ", ...)\n" : ")\n");
  }
  if (!fresh.empty()) {
    std::cerr << "note: " << path << ": newly initialised:";
    for (const auto& n : fresh) std::cerr << " " << n;
    std::cerr << "\n";
  }
}
}  // namespace

void load_weights(Bert& model, const std::string& path, bool new_heads) {
  std::vector<SourceTensor> src;
  if (looks_like_torch_zip(path)) {
    TorchCheckpoint ck(path);
    for (const auto& t : ck.tensors()) {
      if (t.dtype.front() != 'F' && t.dtype != "BF16") {
        BERTCC_CHECK(canonical_param_name(t.name).empty(), path, ": tensor '", t.name, "' has dtype ", t.dtype,
                     ", expected a floating type");
        continue;  // an integer buffer (position_ids)
      }
      src.push_back({t.name, t.shape, [&ck, &t](float* dst) { ck.read_f32(t, dst); }});
    }
    load_tensors(model, src, path, new_heads);
    return;
  }
  SafetensorsFile f(path);
  for (const auto& t : f.tensors()) src.push_back({t.name, t.shape, [&f, &t](float* dst) { f.read_f32(t, dst); }});
  load_tensors(model, src, path, new_heads);
}

BertConfig load_model_config(const std::string& dir) {
  std::string cfg = join_path(dir, "config.json");
  if (!file_exists(cfg)) cfg = join_path(dir, "bert_config.json");
  BERTCC_CHECK(file_exists(cfg), dir, ": no config.json or bert_config.json in the model directory");
  return load_config(cfg);
}

std::string architecture_of(const std::string& dir) {
  std::string cfg = join_path(dir, "config.json");
  if (!file_exists(cfg)) cfg = join_path(dir, "bert_config.json");
  BERTCC_CHECK(file_exists(cfg), dir, ": no config.json or bert_config.json in the model directory");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(cfg, kMaxConfigBytes, "config file"));
  } catch (const nlohmann::json::exception& e) {
    fail(cfg, ": not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    return "";
  return j["architectures"][0].get<std::string>();
}

Heads architecture_heads(const std::string& dir) {
  const HeadSpec* s = head_by_architecture(architecture_of(dir));
  return s && s->by_architecture ? s->id : Heads::None;
}

void check_model_dir_for(const std::string& dir, Heads want, const std::string& command) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const HeadSpec& w = head_spec(want);
  if (!fs::exists(dir, ec)) {  // what makes one: a backbone (random, pre-trained, imported) or the task's model
    const bool backbone = w.labels == HeadLabels::None;
    fail(command, ": model directory '", dir, "' does not exist; make one with ",
         backbone ? std::string("`bertcc init-model --config bert-base --vocab vocab.txt --output-dir ") + dir +
                        "` (random weights), `bertcc pretrain`, or `bertcc convert` (a PyTorch checkpoint)"
                  : std::string(w.make_command));
  }
  BERTCC_CHECK(fs::is_directory(dir, ec), command, ": '", dir,
               "' is not a directory (a model directory holds config.json, model.safetensors and vocab.txt)");
  if (w.labels == HeadLabels::None) return;  // any encoder
  const std::string arch = architecture_of(dir);
  if (arch.empty()) return;  // Google's bert_config.json and others: the tensors decide
  const HeadSpec& h = head_spec(architecture_heads(dir));
  const bool encoder = h.labels == HeadLabels::None;
  const auto mlm = [&](const HeadSpec& s) {
    return s.labels == HeadLabels::MaskedLm || (encoder && arch.find("MaskedLM") != std::string::npos) ||
           (encoder && arch.find("PreTraining") != std::string::npos && arch.rfind("Electra", 0) != 0);
  };
  // the same head, or another for the same task (the two QA heads)
  bool ok = &h == &w || (w.task && h.task && std::string(w.task) == h.task);
  if (w.labels == HeadLabels::MaskedLm) ok = mlm(h);
  if (ok) return;
  std::string kind = arch;
  const bool backbone = !h.task;  // no task head: fine-tune this one
  if (encoder && mlm(h))
    kind += ", a pre-training checkpoint";
  else
    kind += h.kind;
  std::string make = w.make_command;
  if (const size_t p = make.find("PRETRAINED"); backbone && p != std::string::npos) make.replace(p, 10, dir);
  fail(command, ": '", dir, "' is a ", kind, " (config.json's architectures); ", command, " needs ", w.what,
       ": make one with ", make);
}

namespace {
std::unique_ptr<Bert> load_dir(const std::string& dir, Heads heads, const NewHeads* fresh,
                               std::optional<Precision> inference) {
  BertConfig config = load_model_config(dir);
  if (fresh) {
    config.id2label = fresh->id2label;
    if (!fresh->task.empty()) config.finetuning_task = fresh->task;
  }
  auto model = std::make_unique<Bert>(config, heads);
  if (fresh) model->init_weights(fresh->seed);
  std::string st = join_path(dir, "model.safetensors");
  if (!file_exists(st)) {
    st = join_path(dir, "pytorch_model.bin");  // read by the safe unpickler (torch_checkpoint.h)
    BERTCC_CHECK(file_exists(st), dir, ": no model.safetensors or pytorch_model.bin in the model directory");
  }
  if (inference) model->prepare_inference_load(*inference);
  load_weights(*model, st, fresh != nullptr);
  if (inference == Precision::I8) model->keep_int8_weights_only();
  if (inference == Precision::F32 || inference == Precision::BF16) model->keep_packed_weights_only(*inference);
  return model;
}
}  // namespace

std::unique_ptr<Bert> load_model_dir(const std::string& dir, Heads heads, const NewHeads* fresh) {
  return load_dir(dir, heads, fresh, std::nullopt);
}

std::unique_ptr<Bert> load_model_dir_for_inference(const std::string& dir, Heads heads, Precision prec) {
  return load_dir(dir, heads, nullptr, prec);
}

void save_model_dir(const Bert& model, const std::string& dir, const std::string& vocab_path,
                    std::optional<bool> lower_case) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // parents too, as mkdir -p
  struct stat st;
  BERTCC_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), dir, ": cannot create model directory");
  std::vector<StWrite> w;
  auto& m = const_cast<Bert&>(model);
  const bool electra = model.config().electra();
  for (const auto& e : model.table().entries()) {
    std::string name = e.name;
    if (electra && name.rfind("bert.", 0) == 0) name.replace(0, 5, "electra.");  // HF's ELECTRA names
    w.push_back({name, e.shape, m.params().data() + e.offset});
  }
  write_safetensors(join_path(dir, "model.safetensors"), w);
  save_config(model.config(), join_path(dir, "config.json"), model.architecture());
  if (vocab_path.empty()) return;
  const std::string text = read_text_file(vocab_path, kMaxVocabBytes, "vocabulary");
  write_file_atomic(join_path(dir, "vocab.txt"), text);
  const Vocab vocab = Vocab::load(vocab_path);
  write_tokenizer_files(dir, vocab, lower_case.value_or(vocab.looks_uncased()), model.config().max_position_embeddings);
}

}  // namespace bertcc
