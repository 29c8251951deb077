// A learning-rate range test (bertcc lr-find) in place of training, for fine-tuning and
// pre-training alike: each step's rate comes from `lr` (steps count from 0), `after_step` sees the
// step's loss (the mean over its examples; steps count from 1) and ends the run by returning false.
// Nothing is evaluated or written by the trainer: no checkpoints, no logs, no model.
#pragma once
#include <cstdint>
#include <functional>

namespace bertcc {

struct RangeTest {
  std::function<float(int64_t step)> lr;
  std::function<bool(int64_t step, float lr, double loss)> after_step;
};

}  // namespace bertcc
