#include "bertcc/rng.h"

#include <cmath>

#if defined(__AVX512F__)
// GCC 12 reports its own _mm512_undefined_epi32() inside avx512fintrin.h as uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

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

namespace {

constexpr int kLanes = 16;
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

// Philox4x32-10 on 16 consecutive blocks; c0..c3 hold word k of each block.
void philox16(uint64_t block, uint64_t seed, uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3) {
#if defined(__AVX512F__)
  alignas(64) uint32_t lo[kLanes], hi[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    lo[l] = static_cast<uint32_t>(block + static_cast<uint64_t>(l));
    hi[l] = static_cast<uint32_t>((block + static_cast<uint64_t>(l)) >> 32);
  }
  __m512i x0 = _mm512_load_si512(lo), x1 = _mm512_load_si512(hi);
  __m512i x2 = _mm512_setzero_si512(), x3 = _mm512_setzero_si512();
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kM0)), m1 = _mm512_set1_epi32(static_cast<int>(kM1));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  auto mulhi = [](__m512i a, __m512i m) {  // high 32 bits of the 32x32 products, per lane
    const __m512i even = _mm512_mul_epu32(a, m);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    return _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  };
  for (int r = 0; r < 10; ++r) {
    const __m512i h0 = mulhi(x0, m0), l0 = _mm512_mullo_epi32(x0, m0);
    const __m512i h1 = mulhi(x2, m1), l1 = _mm512_mullo_epi32(x2, m1);
    x0 = _mm512_xor_si512(_mm512_xor_si512(h1, x1), _mm512_set1_epi32(static_cast<int>(k0)));
    x2 = _mm512_xor_si512(_mm512_xor_si512(h0, x3), _mm512_set1_epi32(static_cast<int>(k1)));
    x1 = l1;
    x3 = l0;
    k0 += kW0;
    k1 += kW1;
  }
  _mm512_storeu_si512(c0, x0);
  _mm512_storeu_si512(c1, x1);
  _mm512_storeu_si512(c2, x2);
  _mm512_storeu_si512(c3, x3);
#else
  for (int l = 0; l < kLanes; ++l) {
    const auto r = philox4x32({static_cast<uint32_t>(block + l), static_cast<uint32_t>((block + l) >> 32), 0, 0},
                              {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    c0[l] = r[0];
    c1[l] = r[1];
    c2[l] = r[2];
    c3[l] = r[3];
  }
#endif
}

}  // namespace

void Rng::fill_u32(uint64_t first, size_t n, uint32_t* out) const {
  uint64_t block = first >> 2;
  const uint64_t end = first + n;
  uint64_t counter = first;
  size_t written = 0;
  while (counter < end) {
    alignas(64) uint32_t c[4][kLanes];
    philox16(block, seed, c[0], c[1], c[2], c[3]);
#if defined(__AVX512F__)
    if ((counter & 3) == 0 && end - counter >= 4 * kLanes) {
      // Whole blocks: out[4l + k] = c[k][l], a 4x16 transpose in registers.
      const __m512i x0 = _mm512_load_si512(c[0]), x1 = _mm512_load_si512(c[1]);
      const __m512i x2 = _mm512_load_si512(c[2]), x3 = _mm512_load_si512(c[3]);
      const __m512i a01 = _mm512_unpacklo_epi32(x0, x1), b01 = _mm512_unpackhi_epi32(x0, x1);
      const __m512i a23 = _mm512_unpacklo_epi32(x2, x3), b23 = _mm512_unpackhi_epi32(x2, x3);
      // Each 128-bit lane of these holds one whole block: lanes of A = blocks 0,4,8,12; B: 1,5,9,13; ...
      const __m512i A = _mm512_unpacklo_epi64(a01, a23), B = _mm512_unpackhi_epi64(a01, a23);
      const __m512i C = _mm512_unpacklo_epi64(b01, b23), D = _mm512_unpackhi_epi64(b01, b23);
      const __m512i E = _mm512_shuffle_i32x4(A, B, 0x88), F = _mm512_shuffle_i32x4(A, B, 0xDD);  // 0 8 1 9 | 4 12 5 13
      const __m512i G = _mm512_shuffle_i32x4(C, D, 0x88),
                    H = _mm512_shuffle_i32x4(C, D, 0xDD);  // 2 10 3 11 | 6 14 7 15
      uint32_t* o = out + written;
      _mm512_storeu_si512(o, _mm512_shuffle_i32x4(E, G, 0x88));       // blocks 0 1 2 3
      _mm512_storeu_si512(o + 16, _mm512_shuffle_i32x4(F, H, 0x88));  // 4 5 6 7
      _mm512_storeu_si512(o + 32, _mm512_shuffle_i32x4(E, G, 0xDD));  // 8 9 10 11
      _mm512_storeu_si512(o + 48, _mm512_shuffle_i32x4(F, H, 0xDD));  // 12 13 14 15
      written += 4 * kLanes;
      counter += 4 * kLanes;
      block += kLanes;
      continue;
    }
#endif
    for (int l = 0; l < kLanes && counter < end; ++l)
      for (uint64_t k = counter & 3; k < 4 && counter < end; ++k, ++counter) out[written++] = c[k][l];
    block += kLanes;
  }
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
