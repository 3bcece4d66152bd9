// Where each committed KV entry lives: the fixed compressed region and the rest
// (FAFO paper section 4.4 and appendix G).
//
// Physical slots [0, region_size) are the region; it holds the entries the
// compression policy keeps, which COMPRESSED (fumble) rows attend by reading only
// those slots. Slots [region_size, n) hold everything else. New entries are appended
// at physical slot n; when the policy changes its choice, entries are exchanged
// between the region and the rest, so the region's size and addresses never change
// and nothing is copied twice. Keys carry their RoPE position, so attention does not
// care where an entry sits; FULL rows still visit entries in logical (sequence)
// order through full_order(), which keeps their arithmetic identical to plain
// decoding's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace fafo {

class KvLayout {
 public:
  explicit KvLayout(int32_t region_size = 0);

  int32_t region_size() const { return region_size_; }
  int32_t size() const { return static_cast<int32_t>(physical_of_.size()); }
  // Region slots in use: min(region_size, size()).
  int32_t region_count() const;
  int32_t physical_of(int32_t logical) const { return physical_of_[static_cast<size_t>(logical)]; }
  int32_t logical_of(int32_t physical) const { return logical_of_[static_cast<size_t>(physical)]; }
  // Physical slots in logical order (for FULL rows); identity until the first exchange
  // (and again after restore_order, or a truncate that leaves every entry in place).
  const std::vector<int32_t>& full_order() const { return physical_of_; }
  bool is_identity() const { return exchanges_ == 0; }

  // Appends n entries (logical size()..size()+n-1) at the same physical slots.
  void append(int32_t n);
  // Makes the region hold exactly `chosen` (distinct logical indices, at most
  // region_count() of them; fewer leaves the remaining region slots to entries
  // not chosen). Returns the physical slot pairs to exchange, in order.
  std::vector<std::pair<int32_t, int32_t>> select(const std::vector<int32_t>& chosen);
  // Forgets the entries from n on: the first n move into physical slots 0..n-1, each
  // staying where it is unless its slot is at n or above (it then takes the slot of a
  // forgotten entry), so the region keeps what it held of them. Returns the exchanges.
  std::vector<std::pair<int32_t, int32_t>> truncate(int32_t n);
  // Forgets the entries from n on and puts the first n at their logical slots (identity
  // again). Returns the exchanges.
  std::vector<std::pair<int32_t, int32_t>> restore_order(int32_t n);
  // Logical entries currently in the region, in physical order.
  std::vector<int32_t> region_entries() const;

 private:
  void exchange(int32_t a, int32_t b, std::vector<std::pair<int32_t, int32_t>>& out);

  int32_t region_size_;
  std::vector<int32_t> physical_of_;
  std::vector<int32_t> logical_of_;
  int64_t exchanges_ = 0;
};

}  // namespace fafo
