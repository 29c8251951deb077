// bertcc serve: see src/serve/server.h.
#include "backend/backend.h"
#include "tools/cli_common.h"

#ifdef BERTCC_HAVE_SERVE
#include "serve/server.h"
#endif

namespace bertcc::tools {

void add_serve(CLI::App& app) {
#ifdef BERTCC_HAVE_SERVE
  auto o = std::make_shared<serve::ServeOptions>();
  auto* s = app.add_subcommand("serve",
                               "Serve fine-tuned models over HTTP: KServe v2 / Triton protocol, /v1 text endpoints, "
                               "dynamic batching, /metrics, a page at /");
  s->add_option("--model", o->models, "model directory, or NAME=DIR (repeatable; name = directory name)")->required();
  s->add_option("--host", o->host, "address to bind (default 127.0.0.1; 0.0.0.0 for every interface)");
  s->add_option("--port", o->port, "port (0: any free port, printed)")
      ->check(in_range(0, 65535, "a TCP port; 0 = any free one"));
  s->add_option(flag("--max-batch-size"), o->max_batch_size, "sequences per forward pass")
      ->check(in_range(1, 4096, "sequences held in memory per forward pass"));
  s->add_option(flag("--max-queue-delay-us"), o->max_queue_delay_us,
                "longest wait for more requests before a forward pass starts")
      ->check(in_range(0, 1e7, "microseconds"));
  s->add_option(flag("--max-queue"), o->max_queue,
                "sequences that may wait per model; more get 503 (413 for a request that alone needs more)")
      ->check(in_range(1, 1e6, "sequences held waiting, per model"));
  s->add_option(flag("--max-inputs"), o->max_inputs, "inputs per request")
      ->check(in_range(1, 1e5, "inputs per request"));
  s->add_option(flag("--max-body-bytes"), o->max_body_bytes,
                "largest request body, any transfer encoding, chunk extensions included (413 above; default 8 MiB)")
      ->check(in_range(1024, 4294967296.0, "bytes of a body held in memory"));
  s->add_option(flag("--max-header-bytes"), o->max_header_bytes,
                "largest request line and headers, and chunked trailers (431 above; default 16 KiB)")
      ->check(in_range(1024, 1 << 24, "bytes of headers held in memory"));
  s->add_option(flag("--max-response-bytes"), o->max_response_bytes,
                "largest response (400 above; refused before the forward pass where the size is known or estimated, "
                "413 on the text endpoints; default 64 MiB)")
      ->check(in_range(4096, 1099511627776.0, "bytes of a response built in memory"));
  s->add_option(flag("--keep-alive-timeout"), o->keep_alive_timeout_s,
                "seconds a connection may wait before starting a request (default 5)")
      ->check(in_range(0.001, 3600, "seconds"));
  s->add_option(flag("--read-timeout"), o->read_timeout_s,
                "seconds to send a whole request, headers and body, once started, and to take a response (default 10)")
      ->check(in_range(0.001, 3600, "seconds"));
  s->add_option(
       flag("--max-connections"), o->max_connections,
       "connections open at once; more are closed when accepted (default 10000, capped by the open-file limit)")
      ->check(in_range(1, 1 << 20, "connections, each with its buffers"));
  s->add_option(flag("--request-timeout"), o->request_timeout_s,
                "seconds a request may wait for its forward pass (504)")
      ->check(in_range(0.001, 3600, "seconds"));
  s->add_option(flag("--max-seq-length"), o->max_seq_length,
                "tokens per sequence of the text endpoints (default: 384 qa, 512 otherwise)")
      ->check(in_range(0, 1 << 20, "tokens per sequence; 0 = the default"));
  s->add_option(flag("--http-threads"), o->http_threads,
                "threads running requests that wait for a forward pass; connections are event-driven and health checks "
                "never wait for these (default: 256)")
      ->check(in_range(0, 10000, "threads"));
  s->add_option(flag("--listen-backlog"), o->listen_backlog,
                "connections the kernel queues before they are accepted (default 4096; capped by net.core.somaxconn)")
      ->check(in_range(1, 1 << 20, "queued connections"));
  s->add_option("--threads", o->threads, "compute threads (default: all cores)")->check(threads_check());
  s->add_option("--precision", o->precision, kInferPrecisionHelp)
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "int8"}));
  add_device_flags(s, o->device);
  add_cuda_graphs_flag(s);
  add_int8_flags(s);
  s->callback([o]() {
    const int rc = serve::run_server(*o);
    if (rc != 0) std::exit(rc);
  });
#else
  auto* s =
      app.add_subcommand("serve", "Serve models over HTTP (not built: Boost.Beast was missing at configure time)");
  s->allow_extras();
  s->callback(
      []() { fail("bertcc was built without Boost.Beast (Debian: libboost-dev); reconfigure to build `serve`"); });
#endif
}

}  // namespace bertcc::tools
