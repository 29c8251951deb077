// TrainingRun's loop and cadence, with a task that only counts (no model). The tests call loop(),
// not train(): train() would take SIGINT/SIGTERM away from this process.
#include <gtest/gtest.h>

#include "train/run.h"

namespace bertcc {
namespace {

// Advances the step; stops by "signal" or ends as a range test at `end_at`; records what the run
// asked of it.
struct CountingTask : TrainingTask {
  TrainingRun& run;
  int64_t end_at = -1;
  StepEnd end_how = StepEnd::Next;
  int steps_made = 0, steps = 0, finishes = 0;
  bool stopped = false, stop_sent = false;
  std::vector<int64_t> logged, saved, evaluated;
  explicit CountingTask(TrainingRun& r) : run(r) {}
  void make_step() override { ++steps_made; }
  StepEnd train_step() override {
    if (run.state.step == end_at && end_how == StepEnd::Stopped && !stop_sent) {
      stop_sent = true;  // (once: a loop that ignored it would go on to the total)
      return StepEnd::Stopped;
    }
    ++steps;
    ++run.state.step;
    if (run.log_due()) logged.push_back(run.state.step);
    if (run.checkpoint_due()) saved.push_back(run.state.step);
    if (run.evaluation_due()) evaluated.push_back(run.state.step);
    return run.state.step == end_at ? end_how : StepEnd::Next;
  }
  void finish(bool s) override {
    ++finishes;
    stopped = s;
  }
};

RunOptions options() {
  RunOptions o;
  o.who = "test";
  o.checkpoint_every = 4;
  o.log_every = 3;
  o.writes = false;
  return o;
}

TEST(TrainingRun, LoopRunsToTheTotalWithTheCadence) {
  TrainingRun run(options());
  run.total_steps = 8;
  run.eval_every = 5;
  CountingTask task(run);
  run.loop(task);
  EXPECT_EQ(task.steps_made, 1);
  EXPECT_EQ(task.steps, 8);
  EXPECT_EQ(task.finishes, 1);
  EXPECT_FALSE(task.stopped);
  EXPECT_EQ(task.logged, (std::vector<int64_t>{3, 6, 8}));  // every log_every steps, and the last
  EXPECT_EQ(task.saved, (std::vector<int64_t>{4}));         // not at the last step: finish() saves
  EXPECT_EQ(task.evaluated, (std::vector<int64_t>{5}));
  EXPECT_EQ(run.clock.first_step, 0);
}

TEST(TrainingRun, ASignalStopsAndARangeTestEnds) {
  TrainingRun stopped_run(options());
  stopped_run.total_steps = 10;
  stopped_run.state.step = 2;  // resumed
  CountingTask stopped(stopped_run);
  stopped.end_at = 5;
  stopped.end_how = TrainingTask::StepEnd::Stopped;
  stopped_run.loop(stopped);
  EXPECT_EQ(stopped_run.clock.first_step, 2);
  EXPECT_EQ(stopped.steps, 3);
  EXPECT_EQ(stopped.finishes, 1);
  EXPECT_TRUE(stopped.stopped);

  TrainingRun ended_run(options());
  ended_run.total_steps = 10;
  CountingTask ended(ended_run);
  ended.end_at = 4;
  ended.end_how = TrainingTask::StepEnd::Ended;
  ended_run.loop(ended);
  EXPECT_EQ(ended.steps, 4);
  EXPECT_FALSE(ended.stopped);  // a range test's end is not a signal: no checkpoint
}

}  // namespace
}  // namespace bertcc
