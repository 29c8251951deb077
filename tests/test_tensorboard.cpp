#include <gtest/gtest.h>

#include "bertcc/tensorboard.h"

TEST(TensorBoard, Crc32cKnownAnswers) {
  EXPECT_EQ(bertcc::crc32c("123456789", 9), 0xE3069283u);  // the standard CRC-32C check value
  EXPECT_EQ(bertcc::crc32c("", 0), 0u);
}
