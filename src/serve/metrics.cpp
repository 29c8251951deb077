#include "serve/metrics.h"

#include <sstream>

namespace bertcc::serve {

const std::vector<double> kSeconds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

void Histogram::add(double v) {
  std::lock_guard<std::mutex> g(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::write(std::ostream& os, const std::string& name, const std::string& labels) const {
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

Histogram& Metrics::hist(std::map<std::string, std::unique_ptr<Histogram>>& m, const std::string& k,
                         const std::vector<double>& b) {
  std::lock_guard<std::mutex> g(mu);
  auto& h = m[k];
  if (!h) h = std::make_unique<Histogram>(b);
  return *h;
}

void Metrics::request(const std::string& endpoint, int status, double seconds) {
  {
    std::lock_guard<std::mutex> g(mu);
    ++requests[{endpoint, status}];
  }
  hist(latency, endpoint, kSeconds).add(seconds);
}

uint64_t Metrics::answered() {
  std::lock_guard<std::mutex> g(mu);
  uint64_t n = 0;
  for (const auto& [k, c] : requests) n += c;
  return n;
}

std::string Metrics::text() {
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

}  // namespace bertcc::serve
