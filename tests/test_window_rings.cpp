// Window-sized KV caches on sliding-window layers (KvCacheShape::ring, Gemma 2 and 3) on
// the backends of this build: the shape's arithmetic and memory; every step's bits, the
// region on window layers and every strategy against the whole-context cache
// (window_rings_check.h) on reference, cpu and Vulkan (lavapipe); a rewind past the ring
// refused and reported (Sequence::reusable); the policies reading the global layers.
// The CUDA backend's kernels: tests/test_cuda_emulated.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fafo/backend_registry.h"
#include "fafo/chat_session.h"
#include "fafo/chat_template.h"
#include "fafo/kv_policy.h"
#include "fafo/sequence.h"
#include "test_support.h"
#include "window_rings_check.h"

namespace fafo {
namespace {

// The backends with rings here: reference, cpu, and Vulkan where a device exists.
std::vector<std::pair<std::string, test::BackendMaker>> ring_backends() {
  std::vector<std::pair<std::string, test::BackendMaker>> out;
  for (const std::string name : {"reference", "cpu", "vulkan"}) {
    const BackendInfo* info = find_backend(name);
    if (!info || info->devices().empty()) continue;
    out.emplace_back(name, [info, name] { return info->create(BackendSpec{name, "", 2}); });
  }
  return out;
}

test::BackendMaker cpu_maker() {
  return [] { return make_backend(BackendSpec{"cpu", "", 2}); };
}

TEST(WindowRings, AShapeSizesEachWindowLayersRing) {
  KvCacheShape s{4, 100, 64};
  s.windows = {16, 0, 16, 0};
  EXPECT_FALSE(s.has_rings());  // ring_step 0: every layer holds capacity entries
  EXPECT_EQ(s.entries(0), 100);
  s.ring_step = 8;
  EXPECT_TRUE(s.has_rings());
  EXPECT_EQ(s.ring(0), 23);
  EXPECT_EQ(s.ring(1), 0);
  EXPECT_EQ(s.entries(0), 23);
  EXPECT_EQ(s.entries(1), 100);
  EXPECT_EQ(s.ring_slot(0, 50), 50 % 23);
  EXPECT_EQ(s.ring_slot(1, 50), 50);
  EXPECT_EQ(s.bytes_per_entry(), 2u * 2 * 64 * 4);  // the global layers'
  EXPECT_EQ(s.ring_bytes(), 2u * 23 * 2 * 64 * 4);
  EXPECT_EQ(s.bytes(), 100u * s.bytes_per_entry() + s.ring_bytes());
  s.windows = {100, 0, 93, 0};  // a ring as long as the context is no ring
  EXPECT_EQ(s.ring(0), 0);
  EXPECT_EQ(s.ring(2), 0);
  s.windows = {16, 0};
  EXPECT_THROW(s.validate(), std::invalid_argument);  // not one window per layer
  KvCacheShape latent{2, 100, 64};
  latent.key_dims = {16, 16};
  latent.value_dims = {16, 16};
  latent.windows = {16, 0};
  latent.ring_step = 8;
  EXPECT_THROW(latent.validate(), std::invalid_argument);
}

// A ring layer's keys sit at their ring slots for the window the ring was made for only:
// attention with another window is refused on every backend here.
TEST(WindowRings, AttentionWithAnotherWindowThanTheRingsIsRefused) {
  for (const auto& [name, make] : ring_backends()) {
    const std::unique_ptr<Backend> be = make();
    KvCacheShape shape{2, 100, 64};
    shape.windows = {16, 0};
    shape.ring_step = 8;
    std::unique_ptr<KvCache> kv = be->create_kv_cache(shape);
    kv->reset_layout(0, 0, 0);
    Activation q = be->alloc_activation(8, 128), out = be->alloc_activation(8, 128);
    StepBatch b = StepBatch::causal({5}, 0);
    KvCache* caches[] = {kv.get()};
    be->begin_step(b, caches);
    const AttentionShape wrong{2, 1, 64, 0.125f, 0.0f, 0};
    EXPECT_THROW(be->attention(0, q, wrong, out), std::invalid_argument) << name;
    const AttentionShape other{2, 1, 64, 0.125f, 0.0f, 32};
    EXPECT_THROW(be->attention(0, q, other, out), std::invalid_argument) << name;
    EXPECT_NO_THROW(be->attention(1, q, wrong, out)) << name << ": layer 1 holds the whole context";
    be->finish_step();
  }
}

// A model's sequences hold rings on the window layers only, where the backend keeps
// them, and their bytes are what the shape says; --swa-full (ring_step 0) holds none.
TEST(WindowRings, TheWindowLayersHoldTheirRingsAndTheMemoryShrinks) {
  test::RingAndFull p = test::open_ring_pair("gemma3-tiny", cpu_maker(), KvCacheType::F32, 512, 2048);
  const KvCacheShape& ring = p.ring->kv_cache().shape();
  ASSERT_EQ(ring.windows, (std::vector<int32_t>{16, 16, 0}));
  EXPECT_EQ(ring.ring(0), 16 + 511);
  EXPECT_EQ(ring.ring(1), 16 + 511);
  EXPECT_EQ(ring.ring(2), 0);
  const uint64_t entry = 2 * 64 * 4;  // keys and values, kv_dim 64, f32
  EXPECT_EQ(p.ring->kv_bytes_per_token(), entry);
  EXPECT_EQ(p.ring->kv_ring_bytes(), 2 * 527 * entry);
  EXPECT_EQ(p.ring->kv_bytes(), 2048 * entry + 2 * 527 * entry);
  EXPECT_FALSE(p.full->kv_cache().shape().has_rings());
  EXPECT_EQ(p.full->kv_bytes(), 3 * 2048 * entry);
  // The backend counts what the rings save.
  const uint64_t before = memory_in_use(p.ring->backend());
  { Sequence third(p.ring->runner(), SequenceOptions{.n_ctx = 2048}); EXPECT_EQ(memory_in_use(p.ring->backend()) - before, third.kv_bytes()); }
}

TEST(WindowRings, EveryStepGivesTheWholeContextCachesBits) {
  for (const auto& [name, make] : ring_backends())
    test::check_ring_steps(make, name, {KvCacheType::F32, KvCacheType::F16, KvCacheType::Q8_0});
}

TEST(WindowRings, TheRegionOnAWindowLayerIsItsEntriesInsideTheWindow) {
  for (const auto& [name, make] : ring_backends()) test::check_ring_region(make, name);
}

// (Not on the reference, the slowest: its steps' bits are checked above.)
TEST(WindowRings, EveryStrategyGivesPlainDecodingsTokens) {
  for (const auto& [name, make] : ring_backends())
    if (name != "reference") test::check_ring_strategies(make, name);
}

// A rewind within a step's reach (a rejected guess) stays exact; one past the ring is
// refused, changing nothing, and reusable() says to feed the context again.
TEST(WindowRings, ARewindWithinAStepStaysExactAndAFartherOneFeedsAgain) {
  for (const char* backend : {"reference", "cpu"}) {
    test::RingAndFull p = test::open_ring_pair("gemma3-tiny", [backend] { return make_backend(BackendSpec{backend, "", 2}); }, KvCacheType::F32, 8);
    const std::vector<int32_t> tokens = test::ring_test_tokens(100, p.ring->config().n_vocab, 3);
    test::feed_ring_and_full(p, std::vector<int32_t>(tokens.begin(), tokens.begin() + 64), 8, backend);
    EXPECT_EQ(p.ring->reusable(58), 58);
    p.ring->truncate(58);
    p.full->truncate(58);
    test::feed_ring_and_full(p, std::vector<int32_t>(tokens.begin() + 58, tokens.begin() + 70), 4, std::string(backend) + " after a rewind");
    EXPECT_EQ(p.ring->reusable(50), 0);  // 20 entries back: past what a step of 8 leaves
    EXPECT_EQ(p.full->reusable(50), 50);
    try {
      p.ring->truncate(50);
      ADD_FAILURE() << "a rewind past the rings was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("feed it again"), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.ring->n_past(), 70);
    // Fed again from the start, the sequence gives the whole-context cache's bits.
    p.ring->truncate(0);
    p.full->truncate(0);
    test::feed_ring_and_full(p, tokens, 8, std::string(backend) + " fed again");
  }
}

// A step longer than the rings' step, or whose rows sit before a rewound context's end,
// fails with a clear error and leaves the sequence usable.
TEST(WindowRings, AStepTheRingsCannotHoldFailsClearly) {
  test::RingAndFull p = test::open_ring_pair("gemma3-tiny", cpu_maker(), KvCacheType::F32, 8);
  const std::vector<int32_t> tokens = test::ring_test_tokens(20, p.ring->config().n_vocab, 5);
  StepBatch long_step = StepBatch::causal(std::vector<int32_t>(tokens.begin(), tokens.begin() + 9), 0);
  try {
    p.ring->forward(long_step);
    ADD_FAILURE() << "a step of 9 tokens over rings for 8 ran";
  } catch (const std::length_error& e) {
    EXPECT_NE(std::string(e.what()).find("ring caches are sized for"), std::string::npos) << e.what();
  }
  test::feed_ring_and_full(p, std::vector<int32_t>(tokens.begin(), tokens.begin() + 8), 8, "after the refused step");
}

// The policies score the global layers: a window layer's ring holds only its last
// entries, which committed_keys says; the global layers' keys are all there.
TEST(WindowRings, PoliciesReadTheGlobalLayersKeys) {
  test::RingAndFull p = test::open_ring_pair("gemma3-tiny", cpu_maker(), KvCacheType::F32, 8);
  test::feed_ring_and_full(p, test::ring_test_tokens(64, p.ring->config().n_vocab, 13), 8, "prefill");
  const std::unique_ptr<KvInspector> inspector = p.ring->inspector();
  EXPECT_FALSE(inspector->global_layer(0));
  EXPECT_TRUE(inspector->global_layer(2));
  EXPECT_EQ(p.ring->committed_keys(2, 0, 64), p.full->committed_keys(2, 0, 64));
  EXPECT_EQ(p.ring->committed_keys(0, 50, 14), p.full->committed_keys(0, 50, 14));  // inside the ring: found by index
  EXPECT_THROW(p.ring->committed_keys(0, 0, 10), std::out_of_range);
}

// A chat whose template renders an earlier reply otherwise than it was generated (as
// templates that drop a reply's reasoning do) keeps only the prefix before that reply,
// far behind what the rings hold: the session feeds the conversation again from the
// start, and the reply is the whole-context session's, which reused the prefix.
TEST(WindowRings, AChatRewoundPastTheRingsFeedsItsConversationAgain) {
  const std::string source =
      "{% for m in messages %}{% if m.role == 'assistant' %}<a>{{ m.content[:2] }}</a>"
      "{% else %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}<a>{% endif %}";
  test::RingAndFull p = test::open_ring_pair("gemma3-tiny", cpu_maker(), KvCacheType::F32, 8, 512);
  const Tokenizer tok(Vocab::from_gguf(p.ring->file()));
  GenerationOptions o;
  o.n_predict = 60;
  o.stop_at_end_of_generation = false;
  o.sampling.temperature = 0;
  o.prefill_chunk = 8;
  std::vector<ChatTurnResult> turns[2];
  int i = 0;
  for (Sequence* m : {p.ring.get(), p.full.get()}) {
    ChatSession chat(*m, tok, ChatTemplate::from_source(source), chat_template_context(tok), "Be brief.");
    turns[i].push_back(chat.turn("Tell me a story about a dog", o));
    turns[i].push_back(chat.turn("And then?", o));
    ++i;
  }
  EXPECT_GT(turns[1][1].reused, 0) << "the whole-context session keeps the prefix";
  EXPECT_EQ(turns[0][1].reused, 0) << "the ring session feeds everything again";
  EXPECT_EQ(turns[0][0].generation.ids, turns[1][0].generation.ids);
  EXPECT_EQ(turns[0][1].generation.ids, turns[1][1].generation.ids);
}

}  // namespace
}  // namespace fafo
