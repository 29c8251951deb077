#include "serve/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <deque>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/signals.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/json_depth.h"
#include "bertcc/inference.h"
#include "bertcc/model_dir.h"
#include "bertcc/runtime.h"
#include "bertcc/tasks.h"
#include "serve/http.h"
#include "serve/kserve.h"
#include "serve/page.h"

namespace bertcc::serve {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

using HttpError = RequestError;  // an HTTP status with its message, thrown by request handling

// ---- metrics ---------------------------------------------------------------------------------
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void add(double v) {
    std::lock_guard<std::mutex> g(mu_);
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++n_;
  }
  void write(std::ostream& os, const std::string& name, const std::string& labels) const {
    std::lock_guard<std::mutex> g(mu_);
    uint64_t cum = 0;
    const std::string sep = labels.empty() ? "" : labels + ",";
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cum += counts_[i];
      os << name << "_bucket{" << sep << "le=\"" << bounds_[i] << "\"} " << cum << "\n";
    }
    os << name << "_bucket{" << sep << "le=\"+Inf\"} " << n_ << "\n";
    os << name << "_sum{" << labels << "} " << sum_ << "\n" << name << "_count{" << labels << "} " << n_ << "\n";
  }

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

const std::vector<double> kSeconds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

struct Metrics {
  std::mutex mu;
  std::map<std::pair<std::string, int>, uint64_t> requests;  // (endpoint, status)
  std::map<std::string, std::unique_ptr<Histogram>> latency, queue, batch;
  std::atomic<int64_t> queued{0};

  Histogram& hist(std::map<std::string, std::unique_ptr<Histogram>>& m, const std::string& k, const std::vector<double>& b) {
    std::lock_guard<std::mutex> g(mu);
    auto& h = m[k];
    if (!h) h = std::make_unique<Histogram>(b);
    return *h;
  }
  void request(const std::string& endpoint, int status, double seconds) {
    {
      std::lock_guard<std::mutex> g(mu);
      ++requests[{endpoint, status}];
    }
    hist(latency, endpoint, kSeconds).add(seconds);
  }
  uint64_t answered() {
    std::lock_guard<std::mutex> g(mu);
    uint64_t n = 0;
    for (const auto& [k, c] : requests) n += c;
    return n;
  }
  std::string text() {
    std::ostringstream os;
    std::lock_guard<std::mutex> g(mu);
    os << "# HELP bertcc_requests_total HTTP requests by endpoint and status code.\n"
          "# TYPE bertcc_requests_total counter\n";
    for (const auto& [k, n] : requests)
      os << "bertcc_requests_total{endpoint=\"" << k.first << "\",code=\"" << k.second << "\"} " << n << "\n";
    os << "# HELP bertcc_errors_total HTTP requests answered with a 4xx or 5xx code.\n"
          "# TYPE bertcc_errors_total counter\n";
    uint64_t errors = 0;
    for (const auto& [k, n] : requests)
      if (k.second >= 400) errors += n;
    os << "bertcc_errors_total " << errors << "\n";
    os << "# HELP bertcc_request_duration_seconds Time from request read to response, by endpoint.\n"
          "# TYPE bertcc_request_duration_seconds histogram\n";
    for (const auto& [k, h] : latency) h->write(os, "bertcc_request_duration_seconds", "endpoint=\"" + k + "\"");
    os << "# HELP bertcc_queue_duration_seconds Time sequences waited for a forward pass, by model.\n"
          "# TYPE bertcc_queue_duration_seconds histogram\n";
    for (const auto& [k, h] : queue) h->write(os, "bertcc_queue_duration_seconds", "model=\"" + k + "\"");
    os << "# HELP bertcc_batch_size Sequences per forward pass, by model.\n# TYPE bertcc_batch_size histogram\n";
    for (const auto& [k, h] : batch) h->write(os, "bertcc_batch_size", "model=\"" + k + "\"");
    os << "# HELP bertcc_queued_sequences Sequences waiting for a forward pass.\n# TYPE bertcc_queued_sequences gauge\n"
       << "bertcc_queued_sequences " << queued.load() << "\n";
    return os.str();
  }
};

// ---- dynamic batching ------------------------------------------------------------------------
using Compute = std::function<std::vector<std::vector<float>>(const std::vector<FtFeature>&)>;

class Batcher {
 public:
  Batcher(std::string model, Compute compute, const ServeOptions& o, Metrics& m, std::mutex& device)
      : model_(std::move(model)), compute_(std::move(compute)), o_(o), m_(m), device_(device),
        thread_([this] { loop(); }) {}
  ~Batcher() { stop(); }

  // The logits of `f`, computed together with other requests' sequences. The job owns a copy of
  // the features: a request that times out returns while the batcher may still hold its job.
  std::vector<std::vector<float>> run(const std::vector<FtFeature>& f) {
    if (f.empty()) return {};
    auto job = std::make_shared<Job>();
    job->f = f;
    job->t0 = Clock::now();
    auto fut = job->done.get_future();
    const int64_t n = static_cast<int64_t>(f.size());
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) throw HttpError(503, "the server is shutting down");
      if (queued_ + n > o_.max_queue)
        throw HttpError(503, "model '" + model_ + "': queue full (" + std::to_string(queued_) +
                                 " sequences waiting, --max-queue " + std::to_string(o_.max_queue) + ")");
      queued_ += n;
      m_.queued += n;
      q_.push_back(job);
    }
    cv_.notify_one();
    if (fut.wait_for(std::chrono::duration<double>(o_.request_timeout_s)) != std::future_status::ready) {
      // Still queued: taken out, its sequences no longer counted. Already taken by the batcher:
      // computed with its batch (from the job's own copy) and dropped.
      std::lock_guard<std::mutex> g(mu_);
      const auto it = std::find(q_.begin(), q_.end(), job);
      if (it != q_.end()) {
        q_.erase(it);
        queued_ -= n;
        m_.queued -= n;
      }
      throw HttpError(504, "model '" + model_ + "': no forward pass within --request-timeout " +
                               std::to_string(o_.request_timeout_s) + " s");
    }
    return fut.get();
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Job {
    std::vector<FtFeature> f;
    Clock::time_point t0;
    std::promise<std::vector<std::vector<float>>> done;
  };

  void loop() {
    const auto delay = std::chrono::microseconds(o_.max_queue_delay_us);
    for (;;) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stopping, nothing left
      const auto deadline = q_.front()->t0 + delay;
      while (!stop_ && queued_ < o_.max_batch_size && Clock::now() < deadline) cv_.wait_until(lk, deadline);
      std::vector<std::shared_ptr<Job>> take;
      int64_t n = 0;
      while (!q_.empty() && (take.empty() || n + static_cast<int64_t>(q_.front()->f.size()) <= o_.max_batch_size)) {
        n += static_cast<int64_t>(q_.front()->f.size());
        take.push_back(q_.front());
        q_.pop_front();
      }
      queued_ -= n;
      m_.queued -= n;
      lk.unlock();
      if (take.empty()) continue;  // the jobs waited for timed out and were taken back
      std::vector<FtFeature> all;
      std::vector<std::shared_ptr<Job>> live;
      const auto now = Clock::now();
      for (auto& j : take) {
        m_.hist(m_.queue, model_, kSeconds).add(std::chrono::duration<double>(now - j->t0).count());
        all.insert(all.end(), j->f.begin(), j->f.end());
        live.push_back(j);
      }
      m_.hist(m_.batch, model_, {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}).add(static_cast<double>(all.size()));
      try {
        std::vector<std::vector<float>> out;
        {
          std::lock_guard<std::mutex> g(device_);  // one forward pass at a time uses all cores
          out = compute_(all);
        }
        size_t at = 0;
        for (auto& j : live) {
          const size_t k = j->f.size();
          j->done.set_value(std::vector<std::vector<float>>(std::make_move_iterator(out.begin() + static_cast<ptrdiff_t>(at)),
                                                            std::make_move_iterator(out.begin() + static_cast<ptrdiff_t>(at + k))));
          at += k;
        }
      } catch (...) {
        for (auto& j : live) j->done.set_exception(std::current_exception());
      }
    }
  }

  std::string model_;
  Compute compute_;
  const ServeOptions& o_;
  Metrics& m_;
  std::mutex& device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> q_;
  int64_t queued_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// ---- models ----------------------------------------------------------------------------------
struct Model {
  std::string name, dir;
  std::vector<std::string> tasks;  // qa | classify | tag | embed | fill-mask
  Heads heads = Heads::None;
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<BertTokenizer> tok;
  std::unique_ptr<Bert> bert;
  TaskOptions topt;
  std::map<std::string, std::unique_ptr<Batcher>> batchers;  // per task (their forward passes differ)
  bool does(const std::string& t) const { return std::find(tasks.begin(), tasks.end(), t) != tasks.end(); }
  Batcher& batcher(const std::string& t) { return *batchers.at(t); }
  const HeadSpec& head() const { return head_spec(heads); }
  bool has_head() const { return head().task != nullptr; }  // its logits answer its task
  bool has_pooler() const { return bert->table().find("bert.pooler.dense.weight") != nullptr; }
};

// The head follows config.json's architectures: a fine-tuned head serves its task; a
// BertForPreTraining checkpoint serves fill-mask and embeddings; anything else its encoder's
// embeddings (each head's HeadSpec::serve_as and serve_tasks).
Heads heads_of(const std::string& dir, std::vector<std::string>& tasks) {
  const HeadSpec* s = head_by_architecture(architecture_of(dir));
  const HeadSpec& h = head_spec(s ? s->serve_as : Heads::None);
  tasks = h.serve_tasks;
  return h.id;
}

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
  md->heads = heads_of(md->dir, md->tasks);
  const std::string vp = join_path(md->dir, "vocab.txt");
  BERTCC_CHECK(file_exists(vp), md->dir, ": no vocab.txt");
  md->vocab = std::make_unique<Vocab>(Vocab::load(vp));
  md->tok = std::make_unique<BertTokenizer>(*md->vocab, model_dir_lower_case(md->dir, *md->vocab));
  md->bert = load_model_dir(md->dir, md->heads);
  // one forward pass at a time (the `device` mutex), so one backend serves every model
  if (!be.on_host()) md->bert->use_backend_for_inference(be, prec);
  const BertConfig& c = md->bert->config();
  BERTCC_CHECK(md->vocab->size() <= c.vocab_size, vp, ": more entries than the model's vocab_size ", c.vocab_size);
  BERTCC_CHECK(!md->head().needs_labels || c.num_labels() > 0,
               md->dir, ": config.json has no labels");
  BERTCC_CHECK(o.max_seq_length <= c.max_position_embeddings, "--max-seq-length ", o.max_seq_length,
               " exceeds max_position_embeddings ", c.max_position_embeddings, " of ", md->dir);
  md->topt.max_seq_length = o.max_seq_length;
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
    if (t == "embed") fn = [bert, bs, prec](const std::vector<FtFeature>& f) { return predict_embeddings(*bert, f, bs, prec); };
    else if (t == "fill-mask")
      fn = [bert, bs, prec, mask](const std::vector<FtFeature>& f) { return predict_masked(*bert, f, bs, prec, mask); };
    else fn = [bert, bs, prec](const std::vector<FtFeature>& f) { return predict_logits(*bert, f, bs, prec); };
    md->batchers[t] = std::make_unique<Batcher>(md->name, on_backend(fn), o, m, device);
  }
  if (!md->has_head()) {  // the Triton outputs of BertModel: last_hidden_state, pooler_output
    Compute fn = [bert, bs, prec](const std::vector<FtFeature>& f) { return predict_hidden(*bert, f, bs, prec); };
    md->batchers["hidden"] = std::make_unique<Batcher>(md->name, on_backend(fn), o, m, device);
  }
  return md;
}

struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::vector<int64_t> idata{};  // INT64 outputs (the joint head's beam indices) instead of data
};

ojson model_metadata(const Model& m);

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


// POST /v2/models/NAME/infer. Returns the body and sets the content type / header length.
std::string kserve_infer(Model& m, const ServeOptions& o, const http::Request& req, http::Response& res) {
  size_t json_len = req.body.size();
  if (req.has_header("Inference-Header-Content-Length")) {
    const std::string h = req.get_header_value("Inference-Header-Content-Length");
    char* end = nullptr;
    const unsigned long long v = std::strtoull(h.c_str(), &end, 10);
    if (h.empty() || *end || v > req.body.size())
      throw HttpError(400, "Inference-Header-Content-Length '" + h + "' is not a length within the body");
    json_len = static_cast<size_t>(v);
  }
  const BertConfig& c = m.bert->config();
  const KserveInput kin = parse_kserve_request(req.body, json_len, c, o.max_inputs);
  const json& j = kin.header;
  const int64_t B = kin.B, S = kin.S;
  const std::vector<int64_t>& len = kin.lengths;
  const std::vector<FtFeature>& f = kin.features;
  const int64_t K1 = c.start_beam(), K2 = c.end_beam();
  if (m.head().beam_search)
    for (int64_t b = 0; b < B; ++b)
      if (len[static_cast<size_t>(b)] < std::max(K1, K2))
        throw HttpError(400, "row " + std::to_string(b) + ": " + std::to_string(len[static_cast<size_t>(b)]) +
                                 " tokens, fewer than the joint head's beam (start_n_top " + std::to_string(K1) +
                                 ", end_n_top " + std::to_string(K2) + ")");
  // The response's size before any work: each output's elements from the model's metadata (-1:
  // the batch, then the sequence), 4 or 8 bytes in binary, at most 24 characters as a JSON number.
  std::map<std::string, std::pair<int64_t, bool>> size_of;  // name -> (elements, INT64)
  const ojson meta = model_metadata(m);
  for (const auto& out : meta["outputs"]) {
    int64_t n = 1, dyn = 0;
    for (const auto& d : out["shape"]) n *= d.get<int64_t>() >= 0 ? d.get<int64_t>() : (dyn++ == 0 ? B : S);
    size_of[out["name"].get<std::string>()] = {n, out["datatype"] == "INT64"};
  }
  // Requested outputs (all when none are named) and which of them go binary.
  bool all_binary = false;
  if (j.contains("parameters") && j["parameters"].is_object() && j["parameters"].contains("binary_data_output"))
    all_binary = j["parameters"]["binary_data_output"].is_boolean() && j["parameters"]["binary_data_output"].get<bool>();
  std::map<std::string, bool> want;  // name -> binary
  if (j.contains("outputs")) {
    if (!j["outputs"].is_array()) throw HttpError(400, "\"outputs\" must be an array");
    for (const auto& r : j["outputs"]) {
      if (!r.is_object() || !r.contains("name") || !r["name"].is_string())
        throw HttpError(400, "every requested output needs a string \"name\"");
      const std::string n = r["name"].get<std::string>();
      if (!size_of.count(n)) throw HttpError(400, "unknown output '" + n + "' for model '" + m.name + "'");
      bool binary = all_binary;
      if (r.contains("parameters") && r["parameters"].is_object() && r["parameters"].contains("binary_data"))
        binary = r["parameters"]["binary_data"].is_boolean() && r["parameters"]["binary_data"].get<bool>();
      want[n] = binary;
    }
  } else {
    for (const auto& [n, bytes] : size_of) want[n] = all_binary;
  }
  int64_t bound = 4096;
  for (const auto& [n, binary] : want) {
    const auto& [elements, i64] = size_of.at(n);
    bound += elements * (binary ? (i64 ? 8 : 4) : 24);
  }
  if (bound > o.max_response_bytes)
    throw HttpError(400, "the outputs asked for (" + std::to_string(B) + " rows of " + std::to_string(S) +
                             " tokens) would take up to " + std::to_string(bound) + " bytes, over --max-response-bytes " +
                             std::to_string(o.max_response_bytes) +
                             ": send fewer rows, name fewer \"outputs\", or ask for binary_data");
  const auto logits = m.batcher(m.has_head() ? m.tasks[0] : "hidden").run(f);
  // Outputs as an ONNX BERT under Triton names them; padded positions hold 0.
  std::vector<OutTensor> outs;
  if (!m.has_head()) {  // BertModel (a pre-training checkpoint's encoder)
    const int64_t C = c.hidden_size;
    OutTensor hs{"last_hidden_state", {B, S, C}, std::vector<float>(static_cast<size_t>(B * S * C), 0.0f)};
    OutTensor po{"pooler_output", {B, C}, {}};
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<float>& v = logits[static_cast<size_t>(b)];
      const int64_t n = len[static_cast<size_t>(b)] * C;
      std::copy(v.begin(), v.begin() + n, hs.data.begin() + b * S * C);
      if (m.has_pooler()) po.data.insert(po.data.end(), v.begin() + n, v.begin() + n + C);
    }
    outs.push_back(std::move(hs));
    if (m.has_pooler()) outs.push_back(std::move(po));
  } else {
    outs = head_outputs(m.head().outputs(c), logits, len, B, S);
  }
  // The JSON header written once into the body (each output's data serialized in place, as
  // ojson's dump writes it), then the binary outputs appended to it.
  ojson r;
  r["model_name"] = m.name;
  r["model_version"] = "1";
  if (j.contains("id")) r["id"] = j["id"];
  r["outputs"] = ojson::array();
  std::string body = r.dump();
  body.resize(body.size() - 2);  // "]}"
  nlohmann::detail::serializer<ojson> ser(nlohmann::detail::output_adapter<char>(body), ' ');
  std::vector<const OutTensor*> binary;
  bool first = true;
  for (const auto& t : outs) {
    auto it = want.find(t.name);
    if (it == want.end()) continue;
    const bool i64 = !t.idata.empty();
    ojson o_{{"name", t.name}, {"datatype", i64 ? "INT64" : "FP32"}, {"shape", t.shape}};
    if (!first) body += ',';
    first = false;
    if (it->second) {
      o_["parameters"] = {{"binary_data_size", i64 ? t.idata.size() * 8 : t.data.size() * 4}};
      body += o_.dump();
      binary.push_back(&t);
      continue;
    }
    std::string head = o_.dump();
    head.pop_back();  // "}"
    body += head;
    body += ",\"data\":[";
    const size_t n = i64 ? t.idata.size() : t.data.size();
    for (size_t i = 0; i < n; ++i) {
      if (i) body += ',';
      if (i64) ser.dump(ojson(t.idata[i]), false, false, 0);
      else ser.dump(ojson(static_cast<double>(t.data[i])), false, false, 0);
    }
    body += "]}";
  }
  body += "]}";
  if (binary.empty()) {
    res.set_header("Content-Type", "application/json");
    return body;
  }
  res.set_header("Inference-Header-Content-Length", std::to_string(body.size()));
  res.set_header("Content-Type", "application/octet-stream");
  for (const OutTensor* t : binary) {
    if (!t->idata.empty()) body.append(reinterpret_cast<const char*>(t->idata.data()), t->idata.size() * 8);
    else body.append(reinterpret_cast<const char*>(t->data.data()), t->data.size() * 4);
  }
  return body;
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

std::atomic<bool> g_stopping{false};

}  // namespace

int run_server(const ServeOptions& o) {
  BERTCC_CHECK(!o.models.empty(), "serve: pass at least one --model");
  BERTCC_CHECK(o.max_batch_size >= 1 && o.max_queue >= 1 && o.max_inputs >= 1 && o.request_timeout_s > 0,
               "serve: --max-batch-size, --max-queue, --max-inputs and --request-timeout must be positive");
  // SIGTERM and SIGINT are taken by bertcc's signal thread (bertcc/signals.h): from here on they
  // stop the server instead of ending the process.
  signals::take_stop_signals();
  set_threads(o.threads);
  const Precision prec = parse_precision(o.precision);
  Backend& be = backend_for(o.device);
  std::cerr << (be.on_host() ? describe_backend(prec == Precision::BF16) : be.describe()) << "\n";
  Metrics metrics;
  std::mutex device;
  std::vector<std::unique_ptr<Model>> models;
  std::map<std::string, Model*> by_name;
  for (const auto& spec : o.models) {
    models.push_back(load(spec, o, prec, metrics, device, be));
    Model* m = models.back().get();
    BERTCC_CHECK(!by_name.count(m->name), "--model ", spec, ": two models are named '", m->name, "' (use NAME=DIR)");
    by_name[m->name] = m;
    std::cerr << "serve: model '" << m->name << "' (" << m->bert->architecture()
              << ", " << m->dir << "):";
    for (const auto& t : m->tasks) std::cerr << " /v1/" << t;
    std::cerr << "\n";
  }

  // The transport (serve/http.h): event-driven connections, each limit enforced on every request.
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;  // as many connections as the hard limit allows
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  http::Limits lim;
  lim.max_header_bytes = o.max_header_bytes;
  lim.max_body_bytes = o.max_body_bytes;
  lim.max_response_bytes = o.max_response_bytes;
  lim.idle_timeout_s = o.keep_alive_timeout_s;
  lim.request_timeout_s = o.read_timeout_s;
  lim.write_timeout_s = o.read_timeout_s;
  lim.worker_threads = o.http_threads > 0 ? o.http_threads : 256;
  lim.max_connections = o.max_connections;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)  // room for models, logs, sockets
    lim.max_connections = static_cast<int>(std::min<rlim_t>(static_cast<rlim_t>(lim.max_connections),
                                                            nofile.rlim_cur > 256 ? nofile.rlim_cur - 128 : nofile.rlim_cur / 2));
  http::Server svr(lim);
  svr.on_answered([&metrics](const std::string& endpoint, int status, double s) { metrics.request(endpoint, status, s); });

  // Every handler: JSON errors (invalid UTF-8 replaced), metrics, the response size limit.
  auto handle = [&metrics, &o](const std::string& endpoint, auto fn) {
    return [&metrics, &o, endpoint, fn](const http::Request& req, http::Response& res) {
      const auto t0 = Clock::now();
      try {
        fn(req, res);
        if (static_cast<int64_t>(res.body.size()) > o.max_response_bytes)
          throw HttpError(400, "the response would be " + std::to_string(res.body.size()) +
                                   " bytes, over --max-response-bytes " + std::to_string(o.max_response_bytes) +
                                   ": send fewer inputs");
      } catch (const HttpError& e) {
        res = http::Response{};
        res.status = e.status;
        res.set_content(http::error_json(e.what()), "application/json");
      } catch (const Error& e) {  // bad input found by the tokenizer / task code
        res = http::Response{};
        res.status = 400;
        res.set_content(http::error_json(e.what()), "application/json");
      } catch (const std::exception& e) {
        res = http::Response{};
        res.status = 500;
        res.set_content(http::error_json(std::string("internal error: ") + e.what()), "application/json");
      }
      metrics.request(endpoint, res.status, std::chrono::duration<double>(Clock::now() - t0).count());
    };
  };
  auto find_model = [&by_name](const std::string& name) -> Model& {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw HttpError(404, "no model named '" + name + "'");
    return *it->second;
  };
  auto ok_json = [](http::Response& res, const ojson& j) {
    res.set_content(j.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
  };

  svr.route("GET", "/v2/health/live", handle("/v2/health/live", [&](const http::Request&, http::Response& res) {
            ok_json(res, ojson::object());
          }), true);
  svr.route("GET", "/v2/health/ready", handle("/v2/health/ready", [&](const http::Request&, http::Response& res) {
            if (g_stopping) throw HttpError(503, "shutting down");
            ok_json(res, ojson::object());
          }), true);
  svr.route("GET", "/v2", handle("/v2", [&](const http::Request&, http::Response& res) {
            ok_json(res, {{"name", "bertcc"}, {"version", "0.1.0"}, {"extensions", {"binary_tensor_data"}}});
          }), true);
  svr.route("GET", R"(/v2/models/([^/]+)(?:/versions/1)?)",
          handle("/v2/models/NAME", [&](const http::Request& req, http::Response& res) {
            ok_json(res, model_metadata(find_model(req.matches[1])));
          }), true);
  svr.route("GET", R"(/v2/models/([^/]+)(?:/versions/1)?/ready)",
          handle("/v2/models/NAME/ready", [&](const http::Request& req, http::Response& res) {
            find_model(req.matches[1]);
            if (g_stopping) throw HttpError(503, "shutting down");
            ok_json(res, ojson::object());
          }), true);
  svr.route("POST", R"(/v2/models/([^/]+)(?:/versions/1)?/infer)",
           handle("/v2/models/NAME/infer", [&](const http::Request& req, http::Response& res) {
             Model& m = find_model(req.matches[1]);
             res.body = kserve_infer(m, o, req, res);
           }));

  // Text endpoints: {"model": NAME (optional when one model does the task), ...one input...} or
  // {"model": ..., "inputs": [ ... ]}, whose items are objects or, as pipelines take them, strings
  // (each {"text": STRING} with the request's other fields: "inputs": ["great", "awful"],
  // "top_k": 3); "inputs": "one string" is a batch of one.
  auto text_task = [&](const std::string& task) {
    return handle("/v1/" + task, [&, task](const http::Request& req, http::Response& res) {
      json j;
      if (const size_t deep = json_too_deep_at(req.body); deep != std::string::npos)
        throw HttpError(400, "request body: JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                 " levels (at byte " + std::to_string(deep + 1) + ")");
      try {
        j = json::parse(req.body);
      } catch (const json::exception& e) {
        throw HttpError(400, std::string("request body is not valid JSON: ") + e.what());
      }
      if (!j.is_object()) throw HttpError(400, "request must be a JSON object");
      Model* m = nullptr;
      if (j.contains("model")) {
        if (!j["model"].is_string()) throw HttpError(400, "\"model\" must be a string");
        m = &find_model(j["model"].get<std::string>());
        if (!m->does(task)) throw HttpError(400, "model '" + m->name + "' does " + m->tasks[0] + ", not " + task);
      } else {
        for (auto& md : models)
          if (md->does(task)) {
            if (m) throw HttpError(400, "several models do " + task + "; name one with \"model\"");
            m = md.get();
          }
        if (!m) throw HttpError(404, "no loaded model does " + task);
      }
      const bool batch = j.contains("inputs");
      std::vector<json> in;
      if (batch) {
        if (j["inputs"].is_string()) j["inputs"] = json::array({j["inputs"]});
        if (!j["inputs"].is_array() || j["inputs"].empty())
          throw HttpError(400, "\"inputs\" must be a non-empty array of objects or strings");
        if (static_cast<int64_t>(j["inputs"].size()) > o.max_inputs)
          throw HttpError(400, std::to_string(j["inputs"].size()) + " inputs exceed --max-inputs " +
                                   std::to_string(o.max_inputs));
        for (const auto& x : j["inputs"]) {
          if (!x.is_string()) {
            in.push_back(x);
            continue;
          }
          if (task == "qa") throw HttpError(400, "/v1/qa inputs are objects {\"question\", \"context\"}, not strings");
          json item = {{"text", x}};
          for (const auto& [k, v] : j.items())
            if (k != "inputs" && k != "model") item[k] = v;
          in.push_back(std::move(item));
        }
      } else {
        in.push_back(j);
      }
      const LogitsFn fn = [m, task](const std::vector<FtFeature>& f) { return m->batcher(task).run(f); };
      const auto& labels = m->bert->config().id2label;
      std::vector<ojson> out = task == "qa"          ? answer_questions(*m->tok, in, m->topt, fn)
                               : task == "classify"  ? classify_texts(*m->tok, labels, in, m->topt, fn)
                               : task == "tag"       ? tag_texts(*m->tok, labels, in, m->topt, fn)
                               : task == "embed"     ? embed_texts(*m->tok, in, m->topt, fn)
                                                     : fill_masks(*m->tok, in, m->topt, fn);
      if (!batch) return ok_json(res, out[0]);
      ok_json(res, {{"model", m->name}, {"results", out}});
    });
  };
  for (const char* t : {"qa", "classify", "tag", "embed", "fill-mask"}) svr.route("POST", std::string("/v1/") + t, text_task(t));
  svr.route("GET", "/v1/models", handle("/v1/models", [&](const http::Request&, http::Response& res) {
            ojson a = ojson::array();
            for (const auto& m : models)
              a.push_back({{"name", m->name}, {"task", m->tasks[0]}, {"tasks", m->tasks},
                           {"architecture", m->bert->architecture()},
                           {"labels", m->bert->config().id2label}});
            ok_json(res, {{"models", a}});
          }), true);
  svr.route("GET", "/metrics", [&metrics](const http::Request&, http::Response& res) {
    res.set_content(metrics.text(), "text/plain; version=0.0.4");
  }, true);
  svr.route("GET", "/", handle("/", [](const http::Request&, http::Response& res) {
            res.set_content(kPageHtml, "text/html; charset=utf-8");
          }), true);

  const int port = svr.bind(o.host, o.port, o.listen_backlog);
  int backlog = o.listen_backlog;
  {
    std::ifstream f("/proc/sys/net/core/somaxconn");  // the kernel caps the backlog there
    int cap = 0;
    if (f >> cap && cap > 0) backlog = std::min(backlog, cap);
  }
  std::thread stopper([&svr]() {
    const int sig = signals::wait_stop();
    if (sig == 0) return;  // woken: the server ended by itself
    g_stopping = true;
    std::cerr << "serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", finishing requests in flight\n";
    svr.stop();
  });
  std::cerr << "serve: listen backlog " << backlog << "\n";
  std::cout << "bertcc serve: listening on http://" << o.host << ":" << port << std::endl;
  bool ok = true;
  try {
    svr.run();  // returns once stopped and every request in flight answered
  } catch (const std::exception& e) {
    std::cerr << "serve: " << e.what() << "\n";
    ok = false;
  }
  if (!g_stopping) {  // the server ended by itself: wake the stopper
    g_stopping = true;
    signals::wake();
  }
  stopper.join();
  for (auto& m : models)
    for (auto& [t, b] : m->batchers) b->stop();
  std::cerr << "serve: stopped after answering " << metrics.answered() << " requests\n";
  return ok ? 0 : 1;
}

}  // namespace bertcc::serve
