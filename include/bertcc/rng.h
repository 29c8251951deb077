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

}  // namespace bertcc
