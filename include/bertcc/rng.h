// Counter-based RNG (Philox4x32-10). The whole state is (seed, offset): saveable, and any
// element's random number can be regenerated without keeping masks around.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace bertcc {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

// SplitMix64 (Steele, Lea, Flood): a 64-bit mixing function for deriving seeds. The k-th output
// of the SplitMix64 stream seeded with s is splitmix64(s + k * kSplitMixGamma).
constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;
inline uint64_t splitmix64(uint64_t x) {
  x += kSplitMixGamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform float in [0, 1) with 24 random bits.
inline float u32_to_unit(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

struct Rng {
  uint64_t seed = 0;
  uint64_t offset = 0;  // advanced by every consumer; saved in checkpoints

  Rng() = default;
  Rng(uint64_t s, uint64_t o) : seed(s), offset(o) {}

  // Reserve `n` counters for one consumer and return the first one (a multiple of 4, so
  // consumers can draw four numbers per Philox call).
  uint64_t reserve(uint64_t n) {
    offset = (offset + 3) & ~uint64_t{3};
    uint64_t o = offset;
    offset += n;
    return o;
  }
  // The i-th uniform of the stream that starts at counter `base`.
  float uniform(uint64_t base, uint64_t i) const;
  // Four raw 32-bit numbers for counters [4*block, 4*block+4) of the dropout stream.
  std::array<uint32_t, 4> block4(uint64_t block) const;
  // Raw numbers of the dropout stream for counters [first, first + n): out[i] is number first+i,
  // identical to what block4/uniform give, computed 16 Philox blocks at a time (vectorised).
  void fill_u32(uint64_t first, size_t n, uint32_t* out) const;
  uint32_t next_u32();  // sequential use (data shuffling, init)
  float next_normal();  // Box-Muller

 private:
  std::array<uint32_t, 4> seq_cache_{};
  uint64_t seq_cache_block_ = ~uint64_t{0};
  float spare_normal_ = 0.0f;
  bool has_spare_ = false;
};

// Dropout keep decision for a raw 32-bit number: keep iff uniform(x) >= p.
inline bool dropout_keep(uint32_t x, float p) { return u32_to_unit(x) >= p; }
// The same decision in integers: dropout_keep(x, p) == ((x >> 8) >= dropout_threshold(p)) for every
// x (u32_to_unit is exact, so the float comparison is the comparison of x >> 8 with p * 2^24).
inline uint32_t dropout_threshold(float p) {
  const double t = static_cast<double>(p) * 16777216.0;
  const double c = static_cast<double>(static_cast<uint64_t>(t));
  return static_cast<uint32_t>(c < t ? c + 1 : c);
}

// Attention dropout draws 16 bits per decision, two decisions per number of the stream, so one
// Philox block decides eight elements. The layout follows the Tensor Core kernels' mma.sync C
// fragments, so that each thread draws exactly the block of its own eight decisions and no lane
// shares numbers with another (attention/tensor_core_kernels.cuh): the scores of head row bh (b*NH + h)
// are cut into tiles of 16 queries x 16 keys (T rounded up to 16), and tile (bh, i/16, j/16) owns
// 128 consecutive numbers (32 blocks). Element (i, j) is decided by block 4 (i % 8) + (j / 2) % 4
// of its tile, word 2 ((i / 8) % 2) + (j / 8) % 2, the low 16 bits for even j, the high for odd j.
// The numbers one site reserves:
constexpr uint64_t attention_drop_numbers(uint64_t BH, uint64_t T) {
  const uint64_t nt = (T + 15) / 16;
  return BH * nt * nt * 128;
}
// Unpadded execution (variable-length attention): a batch of B sequences, sequence b rows cu[b] to
// cu[b+1], each numbered as a batch of that sequence alone, after the sequences before it.
inline uint64_t attention_varlen_drop_numbers(const int64_t* cu, int64_t B, uint64_t NH) {
  uint64_t d = 0;
  for (int64_t b = 0; b < B; ++b) d += attention_drop_numbers(NH, static_cast<uint64_t>(cu[b + 1] - cu[b]));
  return d;
}
// The number (from the site's base) that decides element (i, j) of head row bh; j % 2 picks its half.
constexpr uint64_t attention_drop_number(uint64_t bh, uint64_t i, uint64_t j, uint64_t T) {
  const uint64_t nt = (T + 15) / 16;
  return ((bh * nt + i / 16) * nt + j / 16) * 128 + ((i % 8) * 4 + (j / 2) % 4) * 4 + 2 * ((i / 8) % 2) + (j / 8) % 2;
}
// Keep iff the element's 16 bits >= dropout_threshold16(p), that is iff uniform(16 bits) >= p
// (p resolved to 2^-16: 0.1 drops with probability 6554/65536 = 0.1000061).
inline uint32_t dropout_threshold16(float p) {
  const double t = static_cast<double>(p) * 65536.0;
  const double c = static_cast<double>(static_cast<uint64_t>(t));
  return static_cast<uint32_t>(c < t ? c + 1 : c);
}
// The element's 16 bits from its number (bit0 = j % 2).
constexpr uint32_t attention_drop_bits(uint32_t number, uint64_t j) {
  return (j & 1) ? number >> 16 : number & 0xFFFFu;
}

}  // namespace bertcc
