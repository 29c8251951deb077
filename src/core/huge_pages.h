// Large buffers (a model's weights, gradients and their bf16 copy) asked for in transparent huge
// pages before they are first touched: faulting 440 MB in 4 KB pages is 110,000 page faults, which
// cost more than the bytes themselves (most of a bert-base load on a virtual machine). A hint
// (MADV_HUGEPAGE): where the kernel offers no huge pages the memory is ordinary pages, as before.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "bertcc/params.h"

namespace bertcc {

// std::allocator that leaves a trivial element it constructs without a value as it is
// (DefaultInitConstruct, bertcc/params.h).
template <typename T>
struct UntouchedAllocator : std::allocator<T>, DefaultInitConstruct {
  static_assert(std::is_trivially_default_constructible_v<T>);
  template <typename U>
  struct rebind {
    using other = UntouchedAllocator<U>;
  };
  UntouchedAllocator() = default;
  template <typename U>
  UntouchedAllocator(const UntouchedAllocator<U>&) noexcept {}
};

// v emptied, then room for n elements in new memory whose whole 2 MB pages were asked for as huge
// pages.
template <typename T, typename A>
void reserve_in_huge_pages(std::vector<T, A>& v, size_t n) {
  std::vector<T, A>().swap(v);
  v.reserve(n);
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(v.data()), end = begin + n * sizeof(T);
  const uintptr_t b = (begin + kHuge - 1) / kHuge * kHuge, e = end / kHuge * kHuge;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
}

// v = n copies of `value`, in new memory whose whole 2 MB pages were asked for as huge pages.
template <typename T, typename A>
void assign_in_huge_pages(std::vector<T, A>& v, size_t n, const T& value) {
  reserve_in_huge_pages(v, n);
  v.assign(n, value);
}

// v = n elements not written (their values whatever the new memory holds: a fresh mapping's zeros
// for allocations this large), nothing of it resident until written.
template <typename T>
void size_untouched_in_huge_pages(std::vector<T, UntouchedAllocator<T>>& v, size_t n) {
  reserve_in_huge_pages(v, n);
  v.resize(n);
}

}  // namespace bertcc
