// Loops whose body may throw. An exception must not leave an OpenMP region (the program would
// terminate): ParallelErrors catches it inside, keeps the one of the lowest index (so the error
// reported does not depend on the thread count) and rethrows it after the loop.
#pragma once
#include <cstddef>
#include <exception>
#include <mutex>

namespace bertcc {

class ParallelErrors {
 public:
  // Runs f() for iteration i; an exception is kept if it is the lowest-index one so far.
  template <class F>
  void run(size_t i, F&& f) noexcept {
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_ || i < index_) {
        error_ = std::current_exception();
        index_ = i;
      }
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr error_;
  size_t index_ = 0;
};

}  // namespace bertcc
