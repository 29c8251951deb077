#include "serve/models.h"

#include <filesystem>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/utf8.h"

namespace bertcc::serve {

using ojson = nlohmann::ordered_json;

namespace {

// The head follows config.json's architectures: a fine-tuned head serves its task; a
// BertForPreTraining checkpoint serves fill-mask and embeddings; anything else its encoder's
// embeddings (each head's HeadSpec::serve_as and serve_tasks).
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    bool invalid = false;
    decode_utf8(p, s.size(), i, invalid);
    if (invalid) return false;
  }
  return true;
}

// Labels name the classes in answers ("label", "scores"): two equal names would merge.
void check_labels_unique(const std::string& dir, const std::vector<std::string>& labels) {
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto [it, fresh] = seen.emplace(labels[i], i);
    BERTCC_CHECK(fresh, join_path(dir, "config.json"), ": id2label names '", labels[i], "' twice (ids ", it->second,
                 " and ", i, "): each label must be unique");
  }
}

Heads heads_of(const std::string& dir, std::vector<std::string>& tasks) {
  const HeadSpec* s = head_by_architecture(architecture_of(dir));
  const HeadSpec& h = head_spec(s ? s->serve_as : Heads::None);
  tasks = h.serve_tasks;
  return h.id;
}

}  // namespace

std::unique_ptr<Model> load(const std::string& spec, const ServeOptions& o, Precision prec, Metrics& m,
                            std::mutex& device, Backend& be) {
  auto md = std::make_unique<Model>();
  const size_t eq = spec.find('=');
  md->dir = eq == std::string::npos ? spec : spec.substr(eq + 1);
  std::string d = md->dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  md->name = eq == std::string::npos ? std::filesystem::path(d).filename().string() : spec.substr(0, eq);
  BERTCC_CHECK(!md->name.empty() && md->name.find_first_of("/?#% ") == std::string::npos, "--model ", spec,
               ": the model name must be non-empty without / ? # % or spaces (use NAME=DIR)");
  BERTCC_CHECK(valid_utf8(md->name), "--model ", spec,
               ": the model name is not valid UTF-8, so no request could name it", " (use NAME=DIR)");
  md->heads = heads_of(md->dir, md->tasks);
  const std::string vp = join_path(md->dir, "vocab.txt");
  BERTCC_CHECK(file_exists(vp), md->dir, ": no vocab.txt");
  md->vocab = std::make_unique<Vocab>(Vocab::load(vp));
  md->tok = std::make_unique<BertTokenizer>(*md->vocab, model_dir_lower_case(md->dir, *md->vocab));
  // on the CPU: quantized or packed as it loads (the load's peak about the model kept); one forward
  // pass at a time (the `device` mutex), so one backend serves every model
  md->bert = be.on_host() ? load_model_dir_for_inference(md->dir, md->heads, prec) : load_model_dir(md->dir, md->heads);
  if (!be.on_host()) md->bert->use_backend_for_inference(be, prec);
  if (!be.on_host() && prec == Precision::I8) md->bert->keep_int8_weights_only();  // (refuses a device)
  const BertConfig& c = md->bert->config();
  BERTCC_CHECK(md->vocab->size() <= c.vocab_size, vp, ": more entries than the model's vocab_size ", c.vocab_size);
  BERTCC_CHECK(!md->head().needs_labels || c.num_labels() > 0, md->dir, ": config.json has no labels");
  BERTCC_CHECK(o.max_seq_length <= c.max_position_embeddings, "--max-seq-length ", o.max_seq_length,
               " exceeds max_position_embeddings ", c.max_position_embeddings, " of ", md->dir);
  check_labels_unique(md->dir, c.id2label);
  md->topt.max_seq_length = o.max_seq_length;
  md->topt.max_response_bytes = o.max_response_bytes;
  md->topt.max_position_embeddings = c.max_position_embeddings;
  // /v1/qa with the beams it was fine-tuned with, and a v2.0 model's null answers
  qa_options_from_model(md->dir, c, md->head().beam_search, md->topt);
  Bert* bert = md->bert.get();
  const int64_t bs = o.max_batch_size;
  const int32_t mask = md->vocab->id("[MASK]");
  // On a device, the batcher's thread first makes it current (the current device is per thread).
  auto on_backend = [&be](Compute fn) -> Compute {
    if (be.on_host()) return fn;
    return [fn, &be](const std::vector<FtFeature>& f) {
      be.bind_thread();
      return fn(f);
    };
  };
  for (const auto& t : md->tasks) {
    Compute fn;
    if (t == "embed")
      fn = [bert, bs, prec](const std::vector<FtFeature>& f) { return predict_embeddings(*bert, f, bs, prec); };
    else if (t == "fill-mask")
      fn = [bert, bs, prec, mask](const std::vector<FtFeature>& f) { return predict_masked(*bert, f, bs, prec, mask); };
    else
      fn = [bert, bs, prec](const std::vector<FtFeature>& f) { return predict_logits(*bert, f, bs, prec); };
    md->batchers[t] = std::make_unique<Batcher>(md->name, on_backend(fn), o, m, device);
  }
  if (!md->has_head()) {  // the Triton outputs of BertModel: last_hidden_state, pooler_output
    Compute fn = [bert, bs, prec](const std::vector<FtFeature>& f) { return predict_hidden(*bert, f, bs, prec); };
    md->batchers["hidden"] = std::make_unique<Batcher>(md->name, on_backend(fn), o, m, device);
  }
  return md;
}

// A task head's outputs (HeadSpec::outputs) from its logits rows, as an ONNX BERT under Triton
// names them: each row of predict_logits is the outputs' values one after another, per token
// (every token's values of each output in turn: QA's start and end, a tagger's K) when the outputs
// have a sequence dimension (padded positions hold 0), else per row (a classifier's K, the joint
// head's beams); INT64 outputs carry indices as floats.
std::vector<OutTensor> head_outputs(const std::vector<HeadOutput>& spec, const std::vector<std::vector<float>>& logits,
                                    const std::vector<int64_t>& len, int64_t B, int64_t S) {
  std::vector<OutTensor> outs;
  std::vector<int64_t> width, offset;  // values per token (or row) of each output, and where they start
  int64_t stride = 0;
  bool per_token = false;
  for (const HeadOutput& o : spec) {
    int64_t n = 1;
    std::vector<int64_t> shape;
    for (const int64_t d : o.shape) {
      per_token = per_token || d == HeadOutput::kSequence;
      shape.push_back(d == HeadOutput::kBatch ? B : d == HeadOutput::kSequence ? S : d);
      if (d >= 0) n *= d;
    }
    width.push_back(n);
    offset.push_back(stride);
    stride += n;
    outs.push_back({o.name, shape, {}});
  }
  for (size_t k = 0; k < spec.size(); ++k) {
    OutTensor& t = outs[k];
    const int64_t n = width[k], off = offset[k];
    std::vector<float> v;
    if (per_token) v.assign(static_cast<size_t>(B * S * n), 0.0f);
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<float>& row = logits[static_cast<size_t>(b)];
      if (per_token) {
        for (int64_t p = 0; p < len[static_cast<size_t>(b)]; ++p)
          for (int64_t j = 0; j < n; ++j)
            v[static_cast<size_t>((b * S + p) * n + j)] = row[static_cast<size_t>(p * stride + off + j)];
      } else {
        v.insert(v.end(), row.begin() + off, row.begin() + off + n);
      }
    }
    if (spec[k].int64)
      for (const float x : v) t.idata.push_back(static_cast<int64_t>(x));
    else
      t.data = std::move(v);
  }
  return outs;
}

ojson model_metadata(const Model& m) {
  const BertConfig& c = m.bert->config();
  ojson in = ojson::array();
  for (const char* n : {"input_ids", "attention_mask", "token_type_ids"})
    in.push_back({{"name", n}, {"datatype", "INT64"}, {"shape", {-1, -1}}});
  ojson out = ojson::array();
  // the head's outputs, or (no task head) the encoder's; -1: the batch or the sequence
  const std::vector<HeadOutput> outs = m.has_head() ? m.head().outputs(c) : head_spec(Heads::None).outputs(c);
  for (const HeadOutput& o : outs) {
    ojson shape = ojson::array();
    for (const int64_t d : o.shape) shape.push_back(d < 0 ? int64_t{-1} : d);
    out.push_back({{"name", o.name}, {"datatype", o.int64 ? "INT64" : "FP32"}, {"shape", shape}});
  }
  ojson meta{{"name", m.name}, {"versions", {"1"}}, {"platform", "bertcc"}, {"inputs", in}, {"outputs", out}};
  // what a client needs to read the outputs: the label of each logit (id2label, in order), and how a
  // SQuAD 2.0 model answers "" (the decoding /v1/qa applies)
  ojson params = ojson::object();
  if (m.has_head() && m.head().needs_labels && c.num_labels() > 1) params["labels"] = c.id2label;
  if (m.topt.version_2_with_negative) {
    params["version_2_with_negative"] = true;
    params["null_score_diff_threshold"] = m.topt.null_score_diff_threshold;
  }
  if (!params.empty()) meta["parameters"] = params;
  return meta;
}

}  // namespace bertcc::serve
