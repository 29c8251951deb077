// bertcc serve: the models, the transport's limits and the route table (see server.h).
#include "serve/server.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/json_depth.h"
#include "bertcc/runtime.h"
#include "bertcc/signals.h"
#include "serve/http.h"
#include "serve/kserve.h"
#include "serve/metrics.h"
#include "serve/models.h"
#include "serve/page.h"

namespace bertcc::serve {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

using HttpError = RequestError;  // an HTTP status with its message, thrown by request handling

std::atomic<bool> g_stopping{false};

// The server's state as the routes see it.
struct App {
  const ServeOptions& o;
  Metrics metrics;
  std::vector<std::unique_ptr<Model>> models;
  std::map<std::string, Model*> by_name;

  Model& find_model(const std::string& name) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw HttpError(404, "no model named '" + name + "'");
    return *it->second;
  }
  Model& model_for(const json& j, const std::string& task);
  void text_task(const std::string& task, const http::Request& req, http::Response& res);
};

void ok_json(http::Response& res, const ojson& j) {
  res.set_content(j.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

// Every handler: JSON errors (invalid UTF-8 replaced), metrics, the response size limit.
template <class Fn>
http::Handler handle(App& app, const std::string& endpoint, Fn fn) {
  return [&app, endpoint, fn](const http::Request& req, http::Response& res) {
    const auto t0 = Clock::now();
    try {
      fn(req, res);
      if (static_cast<int64_t>(res.body.size()) > app.o.max_response_bytes)
        throw HttpError(400, "the response would be " + std::to_string(res.body.size()) +
                                 " bytes, over --max-response-bytes " + std::to_string(app.o.max_response_bytes) +
                                 ": send fewer inputs");
    } catch (const HttpError& e) {
      res = http::Response{};
      res.status = e.status;
      res.set_content(http::error_json(e.what()), "application/json");
    } catch (const ResponseTooLarge& e) {  // estimated before the forward pass
      res = http::Response{};
      res.status = 413;
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
    app.metrics.request(endpoint, res.status, std::chrono::duration<double>(Clock::now() - t0).count());
  };
}

// The model a text request names, or the one model that does its task.
Model& App::model_for(const json& j, const std::string& task) {
  Model* m = nullptr;
  if (j.contains("model")) {
    if (!j["model"].is_string()) throw HttpError(400, "\"model\" must be a string");
    m = &find_model(j["model"].get<std::string>());
    if (!m->does(task)) throw HttpError(400, "model '" + m->name + "' does " + m->tasks[0] + ", not " + task);
    return *m;
  }
  for (auto& md : models)
    if (md->does(task)) {
      if (m) throw HttpError(400, "several models do " + task + "; name one with \"model\"");
      m = md.get();
    }
  if (!m) throw HttpError(404, "no loaded model does " + task);
  return *m;
}

// Text endpoints: {"model": NAME (optional when one model does the task), ...one input...} or
// {"model": ..., "inputs": [ ... ]}, whose items are objects or, as pipelines take them, strings
// (each {"text": STRING} with the request's other fields: "inputs": ["great", "awful"],
// "top_k": 3); "inputs": "one string" is a batch of one.
void App::text_task(const std::string& task, const http::Request& req, http::Response& res) {
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
  Model* m = &model_for(j, task);
  const bool batch = j.contains("inputs");
  std::vector<json> in;
  if (batch) {
    if (j["inputs"].is_string()) j["inputs"] = json::array({j["inputs"]});
    if (!j["inputs"].is_array() || j["inputs"].empty())
      throw HttpError(400, "\"inputs\" must be a non-empty array of objects or strings");
    if (static_cast<int64_t>(j["inputs"].size()) > o.max_inputs)
      throw HttpError(
          400, std::to_string(j["inputs"].size()) + " inputs exceed --max-inputs " + std::to_string(o.max_inputs));
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
  std::vector<ojson> out = task == "qa"         ? answer_questions(*m->tok, in, m->topt, fn)
                           : task == "classify" ? classify_texts(*m->tok, labels, in, m->topt, fn)
                           : task == "tag"      ? tag_texts(*m->tok, labels, in, m->topt, fn)
                           : task == "embed"    ? embed_texts(*m->tok, in, m->topt, fn)
                                                : fill_masks(*m->tok, in, m->topt, fn);
  if (!batch) return ok_json(res, out[0]);
  ok_json(res, {{"model", m->name}, {"results", out}});
}

void load_models(App& app, Precision prec, std::mutex& device, Backend& be) {
  for (const auto& spec : app.o.models) {
    app.models.push_back(load(spec, app.o, prec, app.metrics, device, be));
    Model* m = app.models.back().get();
    BERTCC_CHECK(!app.by_name.count(m->name), "--model ", spec, ": two models are named '", m->name,
                 "' (use NAME=DIR)");
    app.by_name[m->name] = m;
    std::cerr << "serve: model '" << m->name << "' (" << m->bert->architecture() << ", " << m->dir << "):";
    for (const auto& t : m->tasks) std::cerr << " /v1/" << t;
    std::cerr << "\n";
  }
}

// The transport's limits from the flags; connections are capped by the open-file limit (raised to
// its hard limit), with room for models, logs and sockets.
http::Limits transport_limits(const ServeOptions& o) {
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
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
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    lim.max_connections = static_cast<int>(std::min<rlim_t>(
        static_cast<rlim_t>(lim.max_connections), nofile.rlim_cur > 256 ? nofile.rlim_cur - 128 : nofile.rlim_cur / 2));
  return lim;
}

void add_routes(http::Server& svr, App& app) {
  svr.route(
      "GET", "/v2/health/live",
      handle(app, "/v2/health/live", [](const http::Request&, http::Response& res) { ok_json(res, ojson::object()); }),
      true);
  svr.route("GET", "/v2/health/ready",
            handle(app, "/v2/health/ready",
                   [](const http::Request&, http::Response& res) {
                     if (g_stopping) throw HttpError(503, "shutting down");
                     ok_json(res, ojson::object());
                   }),
            true);
  svr.route("GET", "/v2",
            handle(app, "/v2",
                   [](const http::Request&, http::Response& res) {
                     ok_json(res, {{"name", "bertcc"}, {"version", "0.1.0"}, {"extensions", {"binary_tensor_data"}}});
                   }),
            true);
  svr.route("GET", R"(/v2/models/([^/]+)(?:/versions/1)?)",
            handle(app, "/v2/models/NAME",
                   [&app](const http::Request& req, http::Response& res) {
                     ok_json(res, model_metadata(app.find_model(req.matches[1])));
                   }),
            true);
  svr.route("GET", R"(/v2/models/([^/]+)(?:/versions/1)?/ready)",
            handle(app, "/v2/models/NAME/ready",
                   [&app](const http::Request& req, http::Response& res) {
                     app.find_model(req.matches[1]);
                     if (g_stopping) throw HttpError(503, "shutting down");
                     ok_json(res, ojson::object());
                   }),
            true);
  svr.route("POST", R"(/v2/models/([^/]+)(?:/versions/1)?/infer)",
            handle(app, "/v2/models/NAME/infer", [&app](const http::Request& req, http::Response& res) {
              Model& m = app.find_model(req.matches[1]);
              const bool has_len = req.has_header("Inference-Header-Content-Length");
              const std::string len = req.get_header_value("Inference-Header-Content-Length");
              KserveAnswer a = kserve_infer(m, app.o, req.body, has_len ? &len : nullptr);
              if (!a.header_length.empty()) res.set_header("Inference-Header-Content-Length", a.header_length);
              res.set_header("Content-Type", a.content_type);
              res.body = std::move(a.body);
            }));
  for (const std::string t : {"qa", "classify", "tag", "embed", "fill-mask"})
    svr.route("POST", "/v1/" + t, handle(app, "/v1/" + t, [&app, t](const http::Request& req, http::Response& res) {
                app.text_task(t, req, res);
              }));
  svr.route("GET", "/v1/models",
            handle(app, "/v1/models",
                   [&app](const http::Request&, http::Response& res) {
                     ojson a = ojson::array();
                     for (const auto& m : app.models)
                       a.push_back({{"name", m->name},
                                    {"task", m->tasks[0]},
                                    {"tasks", m->tasks},
                                    {"architecture", m->bert->architecture()},
                                    {"labels", m->bert->config().id2label}});
                     ok_json(res, {{"models", a}});
                   }),
            true);
  svr.route("GET", "/metrics",
            // Counted as every request is (Triton's and KServe's servers count their metrics endpoint too);
            // a scrape shows the scrapes before it, not itself.
            handle(app, "/metrics",
                   [&app](const http::Request&, http::Response& res) {
                     res.set_content(app.metrics.text(), "text/plain; version=0.0.4");
                   }),
            true);
  svr.route(
      "GET", "/",
      handle(app, "/",
             [](const http::Request&, http::Response& res) { res.set_content(kPageHtml, "text/html; charset=utf-8"); }),
      true);
}

int listen_backlog(int asked) {
  std::ifstream f("/proc/sys/net/core/somaxconn");  // the kernel caps the backlog there
  int cap = 0;
  return f >> cap && cap > 0 ? std::min(asked, cap) : asked;
}

}  // namespace

int run_server(const ServeOptions& o) {
  BERTCC_CHECK(!o.models.empty(), "serve: pass at least one --model");
  BERTCC_CHECK(o.max_batch_size >= 1 && o.max_queue >= 1 && o.max_inputs >= 1 && o.request_timeout_s > 0,
               "serve: --max-batch-size, --max-queue, --max-inputs and --request-timeout must be positive");
  // SIGTERM and SIGINT are taken by bertcc's signal thread (bertcc/signals.h): from here on they
  // stop the server instead of ending the process.
  signals::take_stop_signals();
  // SIGHUP (a closed terminal) and SIGUSR1 would end the process at once, dropping the requests in
  // flight: ignored, as under nohup. SIGTERM and SIGINT stop the server after those requests.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGHUP, &ignore, nullptr);
  sigaction(SIGUSR1, &ignore, nullptr);
  set_threads(o.threads);
  Backend& be = backend_for(o.device);
  const Precision prec = resolve_precision(o.precision, be.on_host());
  std::cerr << (be.on_host() ? describe_backend(prec) : be.describe()) << "\n";
  App app{o, {}, {}, {}};
  std::mutex device;
  load_models(app, prec, device, be);

  // The transport (serve/http.h): event-driven connections, each limit enforced on every request.
  http::Server svr(transport_limits(o));
  svr.on_answered(
      [&app](const std::string& endpoint, int status, double s) { app.metrics.request(endpoint, status, s); });
  add_routes(svr, app);
  const int port = svr.bind(o.host, o.port, o.listen_backlog);
  std::thread stopper([&svr]() {
    const int sig = signals::wait_stop();
    if (sig == 0) return;  // woken: the server ended by itself
    g_stopping = true;
    std::cerr << "serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", finishing requests in flight\n";
    svr.stop();
  });
  std::cerr << "serve: listen backlog " << listen_backlog(o.listen_backlog) << "\n";
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
  for (auto& m : app.models)
    for (auto& [t, b] : m->batchers) b->stop();
  std::cerr << "serve: stopped after answering " << app.metrics.answered() << " requests\n";
  return ok ? 0 : 1;
}

}  // namespace bertcc::serve
