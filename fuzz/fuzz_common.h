// libFuzzer targets: each feeds one input to a parser. A parser may refuse an input with
// bertcc::Error (that is the contract); anything else — a crash, a sanitizer report, another
// exception type, a hang, unbounded memory — is a finding. Readers that take a path get the input
// through a per-process file under /tmp.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "bertcc/error.h"

namespace bertcc::fuzz {

// The input as a file (rewritten each call); returns its path.
inline const std::string& as_file(const uint8_t* data, size_t size, const char* ext) {
  static const std::string path = "/tmp/bertcc_fuzz_" + std::to_string(::getpid()) + ext;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

// Runs `f`; bertcc::Error is an accepted outcome, anything else propagates (libFuzzer reports it).
template <class F>
void expect_ok_or_error(F&& f) {
  try {
    f();
  } catch (const bertcc::Error&) {
  }
}

}  // namespace bertcc::fuzz
