// The layout of bertcc's own int8 kernels' weight operand (gemm_int8_rows.cpp), for code that
// writes it directly (the int8 attention quantizes k and v straight into it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace bertcc::kernels {

// Storage on whole cache lines: the kernels read a panel's k-quads 32 bytes at a time, and from an
// address 16 bytes into a line (malloc's alignment) every other read would span two lines.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{64}); }
  bool operator==(const CacheLineAllocator&) const { return true; }
};

struct Int8Panels {
  int64_t N = 0, K = 0, Kq = 0;  // Kq: k-quads (K rounded up to 4, over 4; 7-bit panels to an even count)
  std::vector<int8_t, CacheLineAllocator<int8_t>> data;  // panels of 16 columns, each [Kq][16][4]; whole groups of
                                                         // kInt8PanelGroup panels (zeros past N and K)
  std::vector<int32_t> comp;  // shift * sum_k w[n][k] over the same padded columns (zeros past N)
  // The kernels read activations a as u8 a + shift and subtract comp: 128 for 8-bit activations
  // ([-127, 127] to [1, 255]), 64 for 7-bit ones ([-63, 63] to [1, 127], which the AVX2 kernel
  // multiplies two k-quads at a time: gemm_int8_rows.cpp)
  int32_t shift = 128;
};

constexpr int64_t kInt8Panel = 16;      // columns in a panel
constexpr int64_t kInt8PanelGroup = 3;  // panels in the VNNI kernel's micro-tile (48 columns)

// Sizes p for a weight [N, K] of 8-bit activations (shift 128) and zeros it (its storage kept: no
// allocation once it has room).
inline void size_int8_panels(Int8Panels& p, int64_t N, int64_t K) {
  p.N = N;
  p.K = K;
  p.Kq = (K + 3) / 4;
  p.shift = 128;
  const int64_t panels = ((N + kInt8Panel - 1) / kInt8Panel + kInt8PanelGroup - 1) / kInt8PanelGroup * kInt8PanelGroup;
  p.data.assign(static_cast<size_t>(panels * p.Kq * 64), 0);
  p.comp.assign(static_cast<size_t>(panels * kInt8Panel), 0);
}

// Where w[n][k] is in p.data.
inline int64_t int8_panel_index(const Int8Panels& p, int64_t n, int64_t k) {
  return (n / kInt8Panel) * p.Kq * 64 + (k / 4) * 64 + (n % kInt8Panel) * 4 + k % 4;
}

}  // namespace bertcc::kernels
