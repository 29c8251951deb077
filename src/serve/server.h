// bertcc serve: fine-tuned models over HTTP.
//   KServe v2 / Triton protocol: /v2/health/{live,ready}, /v2, /v2/models/NAME[/ready],
//     POST /v2/models/NAME/infer (input_ids, attention_mask, token_type_ids as INT32/INT64, JSON or
//     Triton's binary tensor extension) -> logits, or start_logits/end_logits;
//   text endpoints: /v1/qa, /v1/classify, /v1/tag, /v1/embed, /v1/fill-mask (one input or
//     {"inputs": [...]}), /v1/models;
//   /metrics (Prometheus), / (a page to try the models).
// Requests are tokenized on the HTTP threads; a batcher per model gathers the sequences of
// concurrent requests (up to --max-batch-size, waiting at most --max-queue-delay-us) into one
// length-sorted forward pass. The queue is bounded (503 when full; 413 for a request that could
// never fit), waits are bounded (504).
// The HTTP transport (serve/http.h, Boost.Beast) bounds every request and connection.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bertcc::serve {

struct ServeOptions {
  std::vector<std::string> models;  // DIR or NAME=DIR
  std::string host = "127.0.0.1";
  int port = 8000;          // 0: any free port (printed)
  int max_batch_size = 32;  // sequences per forward pass
  int64_t max_queue_delay_us = 2000;
  int64_t max_queue = 1024;         // sequences waiting, over all requests of a model
  int http_threads = 0;             // threads running requests that wait for a forward pass (0: 256)
  int listen_backlog = 4096;        // connections the kernel queues before accept (capped by somaxconn)
  int max_connections = 10000;      // open at once (capped by the open-file limit); more are closed
  double keep_alive_timeout_s = 5;  // to start a request on a new or kept-alive connection
  double read_timeout_s = 10;       // to send a whole request once started (and to take a response)
  int threads = 0;                  // compute threads (0: all cores)
  std::string precision = "auto";
  std::string device = "cpu";             // cpu | cuda[:N] | cpu-staged: where every model computes
  int64_t max_body_bytes = 8 << 20;       // any transfer encoding (413 above)
  int64_t max_header_bytes = 16 << 10;    // request line and headers (431 above)
  int64_t max_response_bytes = 64 << 20;  // 400 above; refused before the forward pass where it can be (413 on /v1)
  int64_t max_inputs = 256;               // inputs (texts, rows) per request
  double request_timeout_s = 30;          // longest wait for a forward pass before 504
  int max_seq_length = 0;                 // text endpoints (0: 384 QA, 512 otherwise)
};

// Loads the models, serves until SIGTERM or SIGINT (in-flight requests finish), returns the exit code.
int run_server(const ServeOptions& o);

}  // namespace bertcc::serve
