#include "bertcc/rng.h"

#include <cmath>

namespace bertcc {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(M0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(M1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

std::array<uint32_t, 4> Rng::block4(uint64_t block) const {
  return philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

float Rng::uniform(uint64_t base, uint64_t i) const {
  const uint64_t idx = base + i;
  return u32_to_unit(block4(idx >> 2)[idx & 3]);
}

uint32_t Rng::next_u32() {
  // A separate stream (counter word 2 = 1) from the dropout stream; cached per block of four.
  const uint64_t idx = offset++;
  const uint64_t block = idx >> 2;
  if (block != seq_cache_block_) {
    seq_cache_ = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 1, 0},
                            {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    seq_cache_block_ = block;
  }
  return seq_cache_[idx & 3];
}

float Rng::next_normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_normal_;
  }
  const double u1 = (static_cast<double>(next_u32() >> 8) + 0.5) * (1.0 / 16777216.0);
  const double u2 = u32_to_unit(next_u32());
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 6.28318530717958647692 * u2;
  spare_normal_ = static_cast<float>(r * std::sin(a));
  has_spare_ = true;
  return static_cast<float>(r * std::cos(a));
}

}  // namespace bertcc
