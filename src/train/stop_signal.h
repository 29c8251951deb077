// SIGINT/SIGTERM during training: the loop finishes its current step, writes a checkpoint and
// returns, so the run can continue with --resume-from-checkpoint.
#pragma once

namespace bertcc {

void install_stop_signals();
int stop_signal();  // the signal received since install_stop_signals(), or 0

}  // namespace bertcc
