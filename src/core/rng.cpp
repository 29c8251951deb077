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

float Rng::uniform(uint64_t base, uint64_t i) const {
  const uint64_t idx = base + i;
  const uint64_t block = idx >> 2;
  auto r = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return u32_to_unit(r[idx & 3]);
}

uint32_t Rng::next_u32() {
  const uint64_t idx = offset++;
  const uint64_t block = idx >> 2;
  auto r = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 1, 0},
                      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return r[idx & 3];
}

float Rng::next_normal() {
  const float u1 = (static_cast<float>(next_u32() >> 8) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = u32_to_unit(next_u32());
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace bertcc
