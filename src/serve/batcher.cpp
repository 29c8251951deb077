#include "serve/batcher.h"

#include <algorithm>

#include "serve/kserve.h"

namespace bertcc::serve {

using HttpError = RequestError;

std::vector<std::vector<float>> Batcher::run(const std::vector<FtFeature>& f) {
  if (f.empty()) return {};
  auto job = std::make_shared<Job>();
  job->f = f;
  job->t0 = Clock::now();
  auto fut = job->done.get_future();
  const int64_t n = static_cast<int64_t>(f.size());
  if (n > o_.max_queue)  // never fits, however long the client waits: not a 503 to retry
    throw HttpError(413, "model '" + model_ + "': the request needs " + std::to_string(n) +
                             " sequences (its inputs' windows), more than --max-queue " + std::to_string(o_.max_queue) +
                             " can ever hold: send fewer or shorter inputs");
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

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Batcher::loop() {
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
        j->done.set_value(
            std::vector<std::vector<float>>(std::make_move_iterator(out.begin() + static_cast<ptrdiff_t>(at)),
                                            std::make_move_iterator(out.begin() + static_cast<ptrdiff_t>(at + k))));
        at += k;
      }
    } catch (...) {
      for (auto& j : live) j->done.set_exception(std::current_exception());
    }
  }
}

}  // namespace bertcc::serve
