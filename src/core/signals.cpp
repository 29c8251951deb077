#include "bertcc/signals.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

namespace bertcc::signals {
namespace {

std::mutex g_mu;
std::condition_variable g_cv;
bool g_started = false;
bool g_taken = false;        // take_stop_signals() was called
std::atomic<int> g_stop{0};  // the signal received since take_stop_signals()
bool g_woken = false;

sigset_t g_set;  // the signals taken: SIGINT and SIGTERM, less any this process inherited as ignored

// A launcher may start bertcc with a signal ignored (a shell's background job ignores SIGINT,
// nohup ...): that signal stays ignored, neither taken nor re-raised.
sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&s, sig);
  }
  return s;
}

[[noreturn]] void die_by(int sig) {
  // The default action, from the one thread that lets the signal through: the process ends by
  // the signal, with the exit status a shell or launcher expects (128 + sig).
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  std::_Exit(128 + sig);  // not reached
}

void take_signals() {
  for (;;) {
    int sig = 0;
    if (sigwait(&g_set, &sig) != 0) continue;
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_taken) die_by(sig);
    g_stop = sig;
    g_cv.notify_all();
  }
}

}  // namespace

void start() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_started) return;
  g_started = true;
  g_set = stop_set();
  pthread_sigmask(SIG_BLOCK, &g_set, nullptr);
  std::thread(take_signals).detach();  // lives as long as the process
}

void take_stop_signals() {
  start();
  std::lock_guard<std::mutex> lock(g_mu);
  g_taken = true;
  g_stop = 0;
  g_woken = false;
}

int stop_requested() { return g_stop; }

int wait_stop() {
  std::unique_lock<std::mutex> lock(g_mu);
  g_cv.wait(lock, [] { return g_stop != 0 || g_woken; });
  return g_stop;
}

void wake() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_woken = true;
  g_cv.notify_all();
}

}  // namespace bertcc::signals
