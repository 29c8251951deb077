#include <gtest/gtest.h>

#include "bertcc/pyrandom.h"

using bertcc::PyRandom;

// Expected values printed by CPython 3.11: random.Random(12345) etc.
TEST(PyRandom, MatchesCPython) {
  PyRandom r(12345);
  EXPECT_DOUBLE_EQ(r.random(), 0.41661987254534116);
  EXPECT_DOUBLE_EQ(r.random(), 0.010169169457068361);
  EXPECT_DOUBLE_EQ(r.random(), 0.8252065092537432);
  for (int64_t want : {9785, 28021, 12072, 6345, 8855}) EXPECT_EQ(r.randint(0, 30521), want);
  std::vector<int> x{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  r.shuffle(x);
  EXPECT_EQ(x, (std::vector<int>{1, 5, 4, 8, 3, 0, 7, 2, 6, 9}));
  EXPECT_EQ(r.getrandbits(32), 2627529228u);
  EXPECT_EQ(r.randint(2, 125), 72);
  PyRandom big((1ull << 40) + 7);  // a seed wider than 32 bits
  EXPECT_DOUBLE_EQ(big.random(), 0.6137037779936511);
  EXPECT_EQ(big.randint(1, 1), 1);
}
