// The device seam (backend/device_ops.h): Ops dispatches each operation through the table a
// device's backend registers, and refuses a table with an entry left unset.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend/backend.h"
#include "backend/device_ops.h"
#include "test_files.h"

namespace {

using bertcc::DeviceKind;
using bertcc::DeviceOps;
using bertcc::Ops;
using bertcc::testing::error_of;

int g_scaled = 0;
void never() { FAIL() << "an operation the test did not call ran"; }
void record_scale(float* x, int64_t n, float s) {
  g_scaled += 1;
  for (int64_t i = 0; i < n; ++i) x[i] *= 2 * s;  // not the CPU's x *= s: the table's own result
}

// A table whose every entry is `never`, but for scale
DeviceOps table_with_scale() {
  DeviceOps t;
  void (*fill)() = never;
  for (size_t i = 0; i < sizeof t / sizeof fill; ++i)
    std::memcpy(reinterpret_cast<char*>(&t) + i * sizeof fill, &fill, sizeof fill);
  t.scale = record_scale;
  return t;
}

TEST(DeviceOps, OpsDispatchesThroughTheRegisteredTable) {
  const DeviceOps t = table_with_scale();
  Ops ops(DeviceKind::CUDA, bertcc::cpu_backend(), &t);
  float x[3] = {1, 2, 3};
  g_scaled = 0;
  ops.scale(x, 3, 2.0f);
  EXPECT_EQ(g_scaled, 1);
  EXPECT_EQ(x[2], 12.0f);  // the table's x *= 2 s, not the CPU's x *= s
  // the CPU's Ops runs kernels/ (x *= s)
  Ops cpu(DeviceKind::CPU, bertcc::cpu_backend());
  cpu.scale(x, 3, 0.5f);
  EXPECT_EQ(x[2], 6.0f);
  EXPECT_EQ(g_scaled, 1);
}

TEST(DeviceOps, ATableWithAnEntryUnsetIsRefused) {
  DeviceOps t = table_with_scale();
  t.add_rows = nullptr;  // entry 1
  const std::string e = error_of([&] { Ops ops(DeviceKind::CUDA, bertcc::cpu_backend(), &t); });
  EXPECT_NE(e.find("entry 1 of the device's operations table"), std::string::npos) << e;
  // and a device kind without its table
  EXPECT_NE(error_of([&] { Ops ops(DeviceKind::CUDA, bertcc::cpu_backend()); }).find("without its table"),
            std::string::npos);
}

}  // namespace
