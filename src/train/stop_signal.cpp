#include "train/stop_signal.h"

#include <atomic>
#include <csignal>

namespace bertcc {
namespace {
std::atomic<int> g_stop{0};
void on_signal(int sig) { g_stop = sig; }
}  // namespace

void install_stop_signals() {
  g_stop = 0;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

int stop_signal() { return g_stop; }

}  // namespace bertcc
