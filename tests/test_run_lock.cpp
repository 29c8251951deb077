// The output-folder lock (bertcc/run_lock.h): one run per folder, the holder named, a crashed
// run's lock taken over.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "bertcc/run_lock.h"
#include "test_files.h"

using namespace bertcc;
using bertcc::testing::error_of;
using bertcc::testing::TmpDir;

namespace {
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string this_host() {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  return h;
}
}  // namespace

TEST(RunLock, SecondHolderIsRefusedNamingTheFirst) {
  TmpDir d;
  RunLock first(d.path.string(), "--output-dir", "pretrain");
  const std::string rec = slurp(d / ".bertcc.lock");
  const std::string pid = "pid " + std::to_string(::getpid());
  EXPECT_EQ(rec.rfind(pid + " on " + this_host() + ", started 20", 0), 0u) << rec;
  EXPECT_NE(rec.find("Z, bertcc pretrain"), std::string::npos) << rec;
  // flock(2) locks belong to an open file description, so a second open in this process is refused
  // as another process's would be.
  const std::string e = error_of([&] { RunLock second(d.path.string(), "--output-dir", "finetune"); });
  EXPECT_NE(e.find("--output-dir " + d.path.string() + ": another run is writing to this folder"), std::string::npos)
      << e;
  EXPECT_NE(e.find(pid + " on " + this_host() + ", started 20"), std::string::npos) << e;
  EXPECT_NE(e.find("bertcc pretrain"), std::string::npos) << e;
  EXPECT_NE(e.find("give another --output-dir"), std::string::npos) << e;
  // The refused run did not touch the holder's record.
  EXPECT_EQ(slurp(d / ".bertcc.lock"), rec);
  first.release();
  EXPECT_FALSE(std::filesystem::exists(d / ".bertcc.lock"));
  RunLock third(d.path.string(), "--output-dir", "finetune");  // free again once released
  EXPECT_NE(slurp(d / ".bertcc.lock").find("bertcc finetune"), std::string::npos);
}

TEST(RunLock, LockOfARunThatDiedIsTakenOver) {
  TmpDir d;
  // A run that ends without releasing (killed, crashed): the kernel drops its flock, its record stays.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      RunLock* leaked = new RunLock(d.path.string(), "--output-dir", "pretrain");
      (void)leaked;
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);  // no destructor runs: the file is left behind, as after SIGKILL
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string stale = slurp(d / ".bertcc.lock");
  ASSERT_EQ(stale.rfind("pid " + std::to_string(child) + " on ", 0), 0u) << stale;

  ::testing::internal::CaptureStderr();
  RunLock next(d.path.string(), "--output-dir", "finetune");
  const std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(note.find("taking over the lock of a run that ended without releasing it"), std::string::npos) << note;
  EXPECT_NE(note.find("pid " + std::to_string(child) + " on "), std::string::npos) << note;
  const std::string rec = slurp(d / ".bertcc.lock");
  EXPECT_EQ(rec.rfind("pid " + std::to_string(::getpid()) + " on ", 0), 0u) << rec;
  EXPECT_NE(rec.find("bertcc finetune"), std::string::npos) << rec;
  EXPECT_EQ(rec.find("pretrain"), std::string::npos) << "the old record is replaced, not appended to: " << rec;
}

TEST(RunLock, AFolderThatCannotHoldTheLockIsNamed) {
  TmpDir d;
  const std::string missing = d / "no-such-folder";
  const std::string e = error_of([&] { RunLock l(missing, "--output-dir", "pretrain"); });
  EXPECT_NE(e.find("--output-dir " + missing + ": cannot create the lock file"), std::string::npos) << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
}
