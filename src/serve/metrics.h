// bertcc serve's Prometheus metrics: requests by endpoint and status, latency, queue wait and batch
// size histograms, and the queued-sequences gauge (GET /metrics).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace bertcc::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void add(double v);
  void write(std::ostream& os, const std::string& name, const std::string& labels) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t n_ = 0;
};

// Latency buckets in seconds.
extern const std::vector<double> kSeconds;

struct Metrics {
  std::mutex mu;
  std::map<std::pair<std::string, int>, uint64_t> requests;  // (endpoint, status)
  std::map<std::string, std::unique_ptr<Histogram>> latency, queue, batch;
  std::atomic<int64_t> queued{0};

  Histogram& hist(std::map<std::string, std::unique_ptr<Histogram>>& m, const std::string& k,
                  const std::vector<double>& b);
  void request(const std::string& endpoint, int status, double seconds);
  uint64_t answered();
  std::string text();  // the Prometheus text format
};

}  // namespace bertcc::serve
