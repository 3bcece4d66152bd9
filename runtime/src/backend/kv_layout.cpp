#include "fafo/kv_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fafo {

KvLayout::KvLayout(int32_t region_size) : region_size_(region_size) {
  if (region_size < 0) throw std::invalid_argument("KvLayout: negative region size");
}

int32_t KvLayout::region_count() const { return std::min(region_size_, size()); }

void KvLayout::append(int32_t n) {
  for (int32_t k = 0; k < n; ++k) {
    const int32_t i = size();
    physical_of_.push_back(i);
    logical_of_.push_back(i);
  }
}

void KvLayout::exchange(int32_t a, int32_t b, std::vector<std::pair<int32_t, int32_t>>& out) {
  if (a == b) return;
  const int32_t la = logical_of_[static_cast<size_t>(a)], lb = logical_of_[static_cast<size_t>(b)];
  std::swap(logical_of_[static_cast<size_t>(a)], logical_of_[static_cast<size_t>(b)]);
  physical_of_[static_cast<size_t>(la)] = b;
  physical_of_[static_cast<size_t>(lb)] = a;
  out.emplace_back(a, b);
  ++exchanges_;
}

std::vector<std::pair<int32_t, int32_t>> KvLayout::select(const std::vector<int32_t>& chosen) {
  const int32_t R = region_count();
  if (static_cast<int32_t>(chosen.size()) > R)
    throw std::invalid_argument("KvLayout: " + std::to_string(chosen.size()) + " entries chosen for a region of " +
                                std::to_string(R));
  std::vector<char> wanted(static_cast<size_t>(size()), 0);
  for (int32_t l : chosen) {
    if (l < 0 || l >= size()) throw std::out_of_range("KvLayout: chosen entry outside the cache");
    if (wanted[static_cast<size_t>(l)]) throw std::invalid_argument("KvLayout: entry chosen twice");
    wanted[static_cast<size_t>(l)] = 1;
  }
  // Region slots whose entry is not wanted are free; wanted entries in the rest move there.
  std::vector<int32_t> free_slots;
  for (int32_t p = 0; p < R; ++p)
    if (!wanted[static_cast<size_t>(logical_of_[static_cast<size_t>(p)])]) free_slots.push_back(p);
  std::vector<std::pair<int32_t, int32_t>> out;
  size_t next = 0;
  for (int32_t l : chosen) {
    const int32_t p = physical_of_[static_cast<size_t>(l)];
    if (p < R) continue;
    exchange(free_slots.at(next++), p, out);
  }
  return out;
}

std::vector<std::pair<int32_t, int32_t>> KvLayout::truncate(int32_t n) {
  if (n < 0 || n > size()) throw std::invalid_argument("KvLayout: truncate beyond the cache");
  // Slots below n that hold a forgotten entry take the kept entries stored at n or above;
  // every other entry stays where it is (so the region keeps what it held of the first n).
  std::vector<int32_t> holes;
  for (int32_t p = 0; p < n; ++p)
    if (logical_of_[static_cast<size_t>(p)] >= n) holes.push_back(p);
  std::vector<std::pair<int32_t, int32_t>> out;
  size_t next = 0;
  for (int32_t l = 0; l < n; ++l)
    if (const int32_t p = physical_of_[static_cast<size_t>(l)]; p >= n) exchange(holes.at(next++), p, out);
  physical_of_.resize(static_cast<size_t>(n));
  logical_of_.resize(static_cast<size_t>(n));
  bool identity = true;
  for (int32_t l = 0; l < n && identity; ++l) identity = physical_of_[static_cast<size_t>(l)] == l;
  if (identity) exchanges_ = 0;
  return out;
}

std::vector<std::pair<int32_t, int32_t>> KvLayout::restore_order(int32_t n) {
  if (n < 0 || n > size()) throw std::invalid_argument("KvLayout: restore_order beyond the cache");
  std::vector<std::pair<int32_t, int32_t>> out;
  for (int32_t l = 0; l < n; ++l) exchange(l, physical_of_[static_cast<size_t>(l)], out);
  physical_of_.resize(static_cast<size_t>(n));
  logical_of_.resize(static_cast<size_t>(n));
  exchanges_ = 0;
  return out;
}

std::vector<int32_t> KvLayout::region_entries() const {
  return std::vector<int32_t>(logical_of_.begin(), logical_of_.begin() + region_count());
}

}  // namespace fafo
