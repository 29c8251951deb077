// Helpers for tests that read and write files: a scratch folder per test, and an error's message.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "bertcc/error.h"

namespace bertcc::testing {

// A fresh folder for the running test (its suite, name and the process id), removed afterwards.
struct TmpDir {
  std::filesystem::path path;
  TmpDir() {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           ("bertcc_test_" + std::to_string(::getpid()) + "_" + t->test_suite_name() + "_" + t->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TmpDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& n) const { return (path / n).string(); }
};

// Runs f and returns its error's message (empty if it did not throw).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace bertcc::testing
