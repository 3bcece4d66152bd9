// Fuzz target: a corpus index file (fafo index build), opened and, when it is accepted,
// searched. The first 4 bytes are the lookup context's seed; the rest is the file.
// Rejections must be IndexError.
#include <random>

#include "fafo/corpus_index.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint32_t seed = data[0] | data[1] << 8 | data[2] << 16 | static_cast<uint32_t>(data[3]) << 24;
  const std::string path = fafo::fuzz::write_input(data + 4, size - 4, ".fidx");
  try {
    const auto index = fafo::CorpusIndex::open(path);
    std::mt19937 rng(seed);
    std::vector<int32_t> context;
    for (int i = 0; i < 8; ++i)
      context.push_back(index->size() && (rng() & 1) ? index->token(rng() % index->size())
                                                     : static_cast<int32_t>(rng() % std::max(1, index->n_vocab())));
    const fafo::CorpusMatch match = index->longest_suffix(context, 1 + static_cast<int32_t>(rng() % 16));
    (void)index->continuations(match, 1 + static_cast<int32_t>(rng() % 5), 8, 1 + static_cast<int32_t>(rng() % 40));
  } catch (const fafo::IndexError&) {
  }
  return 0;
}
