// SIGINT and SIGTERM are taken by one thread (sigwait), never by a handler running on a compute
// thread. A handler runs on whatever thread the kernel picks, and the kernel writes its frame
// below that thread's stack pointer. oneDNN's JIT f32 GEMM kernels (Debian's 2.6 and every release
// before the fix of uxlfoundation/oneDNN#4845) point rsp into a heap workspace while they run, so
// a handled SIGTERM that lands in one of them overwrites the heap. bertcc saw that as a crash in
// about one of 16 SIGTERM-stopped runs, and in each of 5 runs sent one SIGTERM every 5 ms.
//
// start() blocks the two signals in the calling thread, and every thread created afterwards
// inherits that mask. Call it first in main(), before any thread exists. Until take_stop_signals()
// the signal thread ends the process with the signal's default action, as if nothing were
// installed; from then on it records the signal for the training loop (or the server) to act on,
// until the process exits.
#pragma once

namespace bertcc::signals {

void start();              // idempotent
void take_stop_signals();  // from now on SIGINT/SIGTERM request a stop instead of ending the process
int stop_requested();      // the signal received since take_stop_signals(), or 0
int wait_stop();           // blocks until one arrives (returns it) or wake() is called (returns 0)
void wake();               // ends a wait_stop() that is waiting, or the next one

}  // namespace bertcc::signals
