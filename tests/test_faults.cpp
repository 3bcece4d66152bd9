// Faults a user meets, each a clear error with nothing lost: a backend out of memory
// (--memory-limit) while loading and in the middle of a generation, a lost device
// (FAFO_INJECT_FAULT's hook, on the host backends and on Vulkan), a model file that
// shrinks while mapped (the SIGBUS guard), and a stop during the prefill or inside a
// multi-token step. After each, the conversation is what it was and goes on to give the
// replies a session that never met the fault gives.
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fafo/backend.h"
#include "fafo/backend_registry.h"
#include "fafo/chat_session.h"
#include "fafo/device_error.h"
#include "fafo/generator.h"
#include "fafo/gguf.h"
#include "fafo/open_model.h"
#include "test_support.h"

namespace fafo {
namespace {

std::filesystem::path stories() { return test::shared_path("models/stories260K.gguf"); }

OpenedModel open_on(const std::string& backend, const std::filesystem::path& path, uint64_t memory_limit = 0,
                    int32_t n_ctx = 512) {
  OpenOptions o;
  o.path = path.string();
  o.backend = BackendSpec{backend, "", 2, memory_limit};
  if (backend.find(',') != std::string::npos) o.split = parse_split(backend);  // a layer split
  o.n_ctx = n_ctx;
  o.gpu_layers = -1;  // every layer on the backend, or the load fails (auto would split)
  return open_model(o);
}

bool has_backend(const std::string& name) {
  if (!find_backend(name)) return false;
  return !find_backend(name)->devices().empty();
}

GenerationOptions greedy(int32_t n, Strategy strategy = Strategy::Ar) {
  GenerationOptions o;
  o.n_predict = n;
  o.sampling.temperature = 0;
  o.decoding.strategy = strategy;
  return o;
}

ChatSession chat_on(OpenedModel& m) {
  return ChatSession(*m.model, *m.tokenizer, ChatTemplate::builtin("chatml"), chat_template_context(*m.tokenizer),
                     "You tell stories.");
}

void expect_same_history(const std::vector<ChatMessage>& got, const std::vector<ChatMessage>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].role, want[i].role) << i;
    EXPECT_EQ(got[i].content, want[i].content) << i;
  }
}

const char* const kFirst = "Tell me a story about a cat.";
const char* const kFailed = "What did the cat do next? Tell me everything about the garden and the dog.";
const char* const kThird = "And then?";

// The replies a session without faults gives: kFirst, then kThird (the failed message
// never joined the conversation).
struct Baseline {
  std::vector<int32_t> first, third;
};
Baseline baseline(const std::string& backend, Strategy strategy = Strategy::Ar) {
  OpenedModel m = open_on(backend, stories());
  ChatSession chat = chat_on(m);
  Baseline b;
  b.first = chat.turn(kFirst, greedy(24, strategy)).generation.ids;
  b.third = chat.turn(kThird, greedy(24, strategy)).generation.ids;
  return b;
}

#define REQUIRE_STORIES() \
  if (!std::filesystem::exists(stories())) GTEST_SKIP() << "shared data not found: " << stories()

// ---- out of memory ------------------------------------------------------------------------

TEST(Faults, AMemoryLimitStopsALoadThatDoesNotFitWithTheSizes) {
  REQUIRE_STORIES();
  for (const char* backend : {"cpu", "reference"}) {
    SCOPED_TRACE(backend);
    const uint64_t used = memory_in_use(open_on(backend, stories()).model->backend());
    EXPECT_GT(used, std::filesystem::file_size(stories()) / 2);  // the weights are counted
    try {
      open_on(backend, stories(), 256 * 1024);
      ADD_FAILURE() << "a model of " << used << " bytes loaded under a limit of 256 KiB";
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.kind(), DeviceError::Kind::OutOfMemory);
      const std::string what = e.what();
      EXPECT_NE(what.find("256 KiB"), std::string::npos) << what;
      EXPECT_NE(what.find("--memory-limit"), std::string::npos) << what;
    }
    EXPECT_THROW(open_on(backend, stories(), used - 1), DeviceError);
    OpenedModel fits = open_on(backend, stories(), used);  // exactly enough
    EXPECT_EQ(memory_in_use(fits.model->backend()), used);
    EXPECT_FALSE(generate(*fits.model, *fits.tokenizer, fits.tokenizer->encode("Once", true), greedy(4)).ids.empty());
  }
}

// An allocation that fails in the middle of a reply (FAFO_INJECT_FAULT's hook: on
// Vulkan, through the path of a real VK_ERROR_OUT_OF_DEVICE_MEMORY).
// On a layer split, the fault is on device `failing_device` (-1: the last).
void out_of_memory_in_a_step(const std::string& backend, const std::vector<Strategy>& strategies,
                             int32_t failing_device = -1) {
  for (Strategy strategy : strategies) {
    SCOPED_TRACE(strategy_name(strategy));
    const Baseline want = baseline(backend, strategy);
    OpenedModel m = open_on(backend, stories());
    ChatSession chat = chat_on(m);
    EXPECT_EQ(chat.turn(kFirst, greedy(24, strategy)).generation.ids, want.first);
    const std::vector<ChatMessage> before = chat.history();
    const int32_t n_past = m.model->n_past();
    const ModelWeights& w = m.model->runner()->weights();
    w.backend(failing_device < 0 ? w.n_devices() - 1 : failing_device)
        .inject_fault(FaultPlan{DeviceError::Kind::OutOfMemory, 3});  // a step of the reply
    std::string shown;
    try {
      chat.turn(kFailed, greedy(24, strategy), [&](const std::string& t) { shown += t; });
      ADD_FAILURE() << "the injected fault did not stop the turn";
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.kind(), DeviceError::Kind::OutOfMemory);
      const std::string what = e.what();
      EXPECT_TRUE(what.find("out of memory") != std::string::npos ||
                  what.find("VK_ERROR_OUT_OF_DEVICE_MEMORY") != std::string::npos)
          << what;
    }
    EXPECT_FALSE(shown.empty()) << "the fault came before the reply began, not in the middle";
    expect_same_history(chat.history(), before);
    EXPECT_LE(m.model->n_past(), n_past);
    EXPECT_EQ(chat.turn(kThird, greedy(24, strategy)).generation.ids, want.third);
  }
}

TEST(Faults, OutOfMemoryInAStepKeepsTheConversationAndItGoesOn) {
  REQUIRE_STORIES();
  out_of_memory_in_a_step("cpu", {Strategy::Ar, Strategy::Fafo});
}

TEST(Faults, OutOfMemoryOnEitherDeviceOfASplitKeepsTheConversationAndItGoesOn) {
  // The first device failing before the second has run its part of the step, and the
  // second after the first has: neither cache keeps anything of the failed turn.
  REQUIRE_STORIES();
  out_of_memory_in_a_step("cpu=2,reference", {Strategy::Ar, Strategy::Fafo}, 0);
  out_of_memory_in_a_step("cpu=2,reference", {Strategy::Fafo}, 1);
}

TEST(Faults, VulkanOutOfMemoryInAStepKeepsTheConversationAndItGoesOn) {
  REQUIRE_STORIES();
  if (!has_backend("vulkan")) GTEST_SKIP() << "no Vulkan device in this build or on this machine";
  out_of_memory_in_a_step("vulkan", {Strategy::Ar});
}

// ---- a lost device ------------------------------------------------------------------------

// The fault on `backend`: the turn fails, every later step is refused, and the
// conversation goes on on the model opened again.
void lost_device_keeps_the_conversation(const std::string& backend, const std::string& expected_text) {
  OpenedModel m = open_on(backend, stories());
  ChatSession chat = chat_on(m);
  chat.turn(kFirst, greedy(24));
  const std::vector<ChatMessage> before = chat.history();
  m.model->backend().inject_fault(FaultPlan{DeviceError::Kind::Lost, 2});
  try {
    chat.turn(kFailed, greedy(24));
    ADD_FAILURE() << "the injected fault did not stop the turn";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.kind(), DeviceError::Kind::Lost);
    EXPECT_NE(std::string(e.what()).find(expected_text), std::string::npos) << e.what();
  }
  expect_same_history(chat.history(), before);
  try {
    chat.turn(kThird, greedy(8));
    ADD_FAILURE() << "a lost device ran another step";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.kind(), DeviceError::Kind::Lost);
    EXPECT_NE(std::string(e.what()).find("open the model again"), std::string::npos) << e.what();
  }
  expect_same_history(chat.history(), before);

  // Opened again (what fafo chat and the studio do), the conversation goes on as a
  // session that resumes it without any fault does.
  OpenedModel again = open_on(backend, stories());
  ChatSession resumed = chat_on(again);
  resumed.restore(chat.history());
  const std::vector<int32_t> got = resumed.turn(kThird, greedy(24)).generation.ids;
  OpenedModel clean = open_on(backend, stories());
  ChatSession reference = chat_on(clean);
  reference.restore(before);
  EXPECT_EQ(got, reference.turn(kThird, greedy(24)).generation.ids);
  EXPECT_FALSE(got.empty());
}

TEST(Faults, ALostHostDeviceRefusesLaterStepsAndTheChatGoesOnAfterOpeningAgain) {
  REQUIRE_STORIES();
  lost_device_keeps_the_conversation("cpu", "lost");
}

TEST(Faults, ALostVulkanDeviceRefusesLaterStepsAndTheChatGoesOnAfterOpeningAgain) {
  REQUIRE_STORIES();
  if (!has_backend("vulkan")) GTEST_SKIP() << "no Vulkan device in this build or on this machine";
  lost_device_keeps_the_conversation("vulkan", "VK_ERROR_DEVICE_LOST");
}

TEST(Faults, VulkanMemoryLimitStopsTheLoadOrTheFirstStepThatDoesNotFitWithTheSizes) {
  REQUIRE_STORIES();
  if (!has_backend("vulkan")) GTEST_SKIP() << "no Vulkan device in this build or on this machine";
  uint64_t loaded = 0, stepped = 0;  // device memory after the load, and after a reply
  {
    OpenedModel m = open_on("vulkan", stories());
    loaded = memory_in_use(m.model->backend());
    generate(*m.model, *m.tokenizer, m.tokenizer->encode("Once upon a time", true), greedy(8));
    stepped = memory_in_use(m.model->backend());
  }
  try {
    open_on("vulkan", stories(), loaded / 2);
    ADD_FAILURE() << "the model loaded in half its memory";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.kind(), DeviceError::Kind::OutOfMemory);
    EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
  }
  // The attention scratch is made by the first step: a limit between the two loads
  // the model and fails the reply, with the conversation kept.
  if (stepped <= loaded) GTEST_SKIP() << "the Vulkan backend allocated nothing in a step";
  OpenedModel m = open_on("vulkan", stories(), loaded + (stepped - loaded) / 2);
  ChatSession chat = chat_on(m);
  const std::vector<ChatMessage> before = chat.history();
  for (int attempt = 0; attempt < 2; ++attempt) {  // and again: the same clear error
    try {
      chat.turn(kFirst, greedy(8));
      ADD_FAILURE() << "the reply fit in the limit";
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.kind(), DeviceError::Kind::OutOfMemory);
      const std::string what = e.what();
      EXPECT_NE(what.find("attention scratch"), std::string::npos) << what;
      EXPECT_NE(what.find("--memory-limit"), std::string::npos) << what;
    }
    expect_same_history(chat.history(), before);
  }
}

// ---- a model file that shrinks -------------------------------------------------------------

TEST(Faults, AModelFileThatShrinksWhileMappedIsAClearErrorNotACrash) {
  REQUIRE_STORIES();
  const auto dir = test::temp_dir("faults-shrink");
  const auto copy = dir / "stories.gguf";
  std::filesystem::copy_file(stories(), copy, std::filesystem::copy_options::overwrite_existing);
  OpenedModel m = open_on("cpu", copy);
  ChatSession chat = chat_on(m);
  chat.turn(kFirst, greedy(8));
  const std::vector<ChatMessage> before = chat.history();

  const uint64_t size = std::filesystem::file_size(copy);
  std::filesystem::resize_file(copy, size / 2);
  try {
    chat.turn(kThird, greedy(8));
    ADD_FAILURE() << "a step ran on a shrunk model file";
  } catch (const GgufError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("changed while in use"), std::string::npos) << what;
    EXPECT_NE(what.find(copy.string()), std::string::npos) << what;
  }
  expect_same_history(chat.history(), before);

  // A read of the map past the new end (what a step racing the truncation does) sees
  // zeros instead of raising SIGBUS, and the file reports the damage.
  const GgufTensor* last = nullptr;
  for (const GgufTensor& t : m.file->tensors())
    if (!last || t.data > last->data) last = &t;
  ASSERT_NE(last, nullptr);
  const uint8_t* p = last->data;
  ASSERT_GT(m.file->data_offset() + last->offset, size / 2 + 8192) << "the last tensor does not lie pages past the new end";
  const volatile uint8_t* beyond = p;
  EXPECT_EQ(beyond[0], 0);
  try {
    m.file->check_intact();
    ADD_FAILURE() << "the damage went unnoticed";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("shrank"), std::string::npos) << e.what();
  }
}

// ---- stops ----------------------------------------------------------------------------------

TEST(Faults, AStopDuringThePrefillLeavesTheConversationAsItWas) {
  REQUIRE_STORIES();
  const Baseline want = baseline("cpu");
  OpenedModel m = open_on("cpu", stories());
  ChatSession chat = chat_on(m);
  EXPECT_EQ(chat.turn(kFirst, greedy(24)).generation.ids, want.first);
  const std::vector<ChatMessage> before = chat.history();
  GenerationOptions o = greedy(24);
  o.prefill_chunk = 4;  // the message is fed in pieces; Ctrl-C arrives during the third
  int asked = 0;
  std::string shown;
  const ChatTurnResult r =
      chat.turn(kFailed, o, [&](const std::string& t) { shown += t; }, [&] { return ++asked > 2; });
  EXPECT_FALSE(r.in_history);
  EXPECT_EQ(r.stop, ChatStop::Stopped);
  EXPECT_TRUE(r.generation.ids.empty());
  EXPECT_EQ(r.generation.stop, StopReason::Cancelled);
  EXPECT_TRUE(shown.empty());
  EXPECT_EQ(asked, 3);
  expect_same_history(chat.history(), before);
  EXPECT_EQ(chat.turn(kThird, greedy(24)).generation.ids, want.third);
}

TEST(Faults, AStopInsideAMultiTokenStepKeepsTheContextRight) {
  REQUIRE_STORIES();
  const std::string prompt_text = "Once upon a time, there was a little girl named Lily. She liked to play outside.";
  for (Strategy strategy : {Strategy::Lookahead, Strategy::Fafo}) {
    SCOPED_TRACE(strategy_name(strategy));
    // Where a step of this strategy emits several tokens.
    OpenedModel probe = open_on("cpu", stories());
    const std::vector<int32_t> prompt = probe.tokenizer->encode(prompt_text, true);
    GenerationOptions o = greedy(96, strategy);
    std::vector<size_t> per_step;
    o.on_step = [&](const StepTrace& t) { per_step.push_back(t.accepted.size()); };
    generate(*probe.model, *probe.tokenizer, prompt, o);
    size_t stop_after = 0, before_step = 1;  // the prefill emits the first token
    for (size_t s = 0; s < per_step.size() && !stop_after; ++s) {
      if (per_step[s] >= 2) stop_after = before_step + 1;  // the step's first token only
      before_step += per_step[s];
    }
    if (!stop_after) GTEST_SKIP() << "no step emitted two tokens";

    // Stopped there, then continued: the same tokens as plain decoding stopped at the
    // same token and continued.
    auto stop_and_continue = [&](Strategy s) {
      OpenedModel m = open_on("cpu", stories());
      GenerationOptions g = greedy(96, s);
      size_t seen = 0;
      const GenerationResult first =
          generate(*m.model, *m.tokenizer, prompt, g, [&](int32_t) { return ++seen < stop_after; });
      EXPECT_EQ(first.stop, StopReason::Cancelled);
      EXPECT_EQ(first.ids.size(), stop_after);
      // As a chat does: the last token was never fed; it starts the next input.
      GenerationOptions next = greedy(32, s);
      next.keep_context = true;
      std::vector<int32_t> context = prompt;
      context.insert(context.end(), first.ids.begin(), first.ids.end() - 1);
      next.context_ids = context;
      std::vector<int32_t> input = {first.ids.back()};
      const std::vector<int32_t> more = m.tokenizer->encode(" The end.", false);
      input.insert(input.end(), more.begin(), more.end());
      std::vector<int32_t> out = first.ids;
      const GenerationResult second = generate(*m.model, *m.tokenizer, input, next);
      out.insert(out.end(), second.ids.begin(), second.ids.end());
      return out;
    };
    EXPECT_EQ(stop_and_continue(strategy), stop_and_continue(Strategy::Ar));
  }
}

// ---- the plan's text ------------------------------------------------------------------------

TEST(Faults, InjectionPlansAndSizesParseOrSayWhy) {
  EXPECT_EQ(parse_fault_plan("oom:3").kind, DeviceError::Kind::OutOfMemory);
  EXPECT_EQ(parse_fault_plan("lost:12").at_step, 12);
  for (const char* bad : {"", "oom", "oom:", "oom:0", "lost:-1", "lost:x", "boom:3", "oom:99999999999999"})
    EXPECT_THROW(parse_fault_plan(bad), std::invalid_argument) << bad;
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("512K"), 512u * 1024);
  EXPECT_EQ(parse_byte_size("1.5G"), 3u * 512 * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("2MiB"), 2u * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("3mb"), 3u * 1024 * 1024);
  for (const char* bad : {"", "M", "1.2.3G", "12Q", "-5M", "0", "1e3", "99999999999T", "5 M"})
    EXPECT_THROW(parse_byte_size(bad), std::invalid_argument) << bad;
  EXPECT_EQ(format_bytes(17), "17 bytes");
  EXPECT_EQ(format_bytes(256 * 1024), "256 KiB");
  EXPECT_EQ(format_bytes(3u * 512 * 1024 * 1024), "1.50 GiB");
}

}  // namespace
}  // namespace fafo
