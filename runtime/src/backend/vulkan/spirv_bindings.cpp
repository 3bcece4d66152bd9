#include "backend/vulkan/spirv_bindings.h"

#include <map>
#include <set>

namespace fafo::vulkan {

namespace {

// SPIR-V opcodes and decorations this reads (SPIR-V 1.0 specification, section 3).
constexpr uint32_t kMagic = 0x07230203;
constexpr uint32_t kOpTypeStruct = 30, kOpTypePointer = 32, kOpVariable = 59, kOpDecorate = 71,
                   kOpMemberDecorate = 72;
constexpr uint32_t kDecorationNonWritable = 24, kDecorationBinding = 33, kDecorationDescriptorSet = 34;

}  // namespace

std::vector<bool> spirv_written_bindings(const uint32_t* words, size_t word_count, uint32_t n_buffers) {
  std::vector<bool> written(n_buffers, true);
  if (words == nullptr || word_count < 5 || words[0] != kMagic) return written;
  std::map<uint32_t, uint32_t> binding, set, pointee, var_type, members;
  std::set<uint32_t> nonwritable;                            // ids decorated NonWritable
  std::map<uint32_t, std::set<uint32_t>> nonwritable_members;  // struct -> members decorated NonWritable
  for (size_t at = 5; at < word_count;) {
    const uint32_t count = words[at] >> 16, op = words[at] & 0xffff;
    if (count == 0 || at + count > word_count) return std::vector<bool>(n_buffers, true);  // malformed
    const uint32_t* w = words + at;
    if (op == kOpDecorate && count >= 3) {
      if (w[2] == kDecorationNonWritable) nonwritable.insert(w[1]);
      if (w[2] == kDecorationBinding && count >= 4) binding[w[1]] = w[3];
      if (w[2] == kDecorationDescriptorSet && count >= 4) set[w[1]] = w[3];
    } else if (op == kOpMemberDecorate && count >= 4 && w[3] == kDecorationNonWritable) {
      nonwritable_members[w[1]].insert(w[2]);
    } else if (op == kOpTypeStruct && count >= 2) {
      members[w[1]] = count - 2;
    } else if (op == kOpTypePointer && count >= 4) {
      pointee[w[1]] = w[3];
    } else if (op == kOpVariable && count >= 4) {
      var_type[w[2]] = w[1];
    }
    at += count;
  }
  std::set<uint32_t> declared;
  for (const auto& [var, b] : binding) {
    const auto s = set.find(var);
    if (b >= n_buffers || (s != set.end() && s->second != 0)) continue;
    declared.insert(b);
    bool read_only = nonwritable.count(var) != 0;
    if (!read_only) {
      const auto t = var_type.find(var);
      const auto p = t == var_type.end() ? pointee.end() : pointee.find(t->second);
      if (p != pointee.end()) {
        const auto m = members.find(p->second);
        const auto nw = nonwritable_members.find(p->second);
        read_only = m != members.end() && nw != nonwritable_members.end() && nw->second.size() == m->second &&
                    m->second > 0;
      }
    }
    if (!read_only) continue;
    written[b] = false;
  }
  for (uint32_t b = 0; b < n_buffers; ++b)
    if (declared.count(b) == 0) written[b] = false;  // not declared: the shader cannot touch it
  return written;
}

}  // namespace fafo::vulkan
