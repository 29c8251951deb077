// bertcc serve's dynamic batcher, one per model and task: the sequences of concurrent requests are
// gathered (up to --max-batch-size, waiting at most --max-queue-delay-us) into one forward pass.
// The queue is bounded (--max-queue: 503 when full) and so are waits (--request-timeout: 504).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bertcc/features.h"
#include "serve/metrics.h"
#include "serve/server.h"

namespace bertcc::serve {

using Compute = std::function<std::vector<std::vector<float>>(const std::vector<FtFeature>&)>;

class Batcher {
 public:
  Batcher(std::string model, Compute compute, const ServeOptions& o, Metrics& m, std::mutex& device)
      : model_(std::move(model)), compute_(std::move(compute)), o_(o), m_(m), device_(device), thread_([this] {
          loop();
        }) {}
  ~Batcher() { stop(); }

  // The logits of `f`, computed together with other requests' sequences. The job owns a copy of
  // the features: a request that times out returns while the batcher may still hold its job.
  std::vector<std::vector<float>> run(const std::vector<FtFeature>& f);
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  struct Job {
    std::vector<FtFeature> f;
    Clock::time_point t0;
    std::promise<std::vector<std::vector<float>>> done;
  };

  void loop();

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

}  // namespace bertcc::serve
