// fafo::ChatSession, the conversation logic `fafo chat` and fafo-studio share: the
// reply text (turn-end text cut off, held back while it may be starting, UTF-8 kept
// whole, the leading space dropped), KV reuse across turns, stopping, resetting, a
// full context, and a template that refuses a conversation. The model is stories260K
// (no chat template of its own: chatml).
#include <gtest/gtest.h>

#include <memory>

#include "fafo/chat_session.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

TEST(ChatSession, ReplyTextCutsAtTheTurnEnd) {
  ChatReplyText r("<|im_end|>");
  std::string shown;
  for (const char* piece : {" Hello", " there", "<|im", "_e", "nd|>", " more"}) shown += r.push(piece);
  shown += r.finish();
  EXPECT_EQ(shown, "Hello there");
  EXPECT_TRUE(r.found_turn_end());
  EXPECT_EQ(r.text(), " Hello there");  // as generated: the conversation keeps the space
}

TEST(ChatSession, ReplyTextHoldsBackAPossibleTurnEnd) {
  ChatReplyText r("<|im_end|>");
  EXPECT_EQ(r.push("a <"), "a ");    // "<" may start the marker
  EXPECT_EQ(r.push("|im"), "");
  EXPECT_EQ(r.push("x"), "<|imx");  // it did not
  EXPECT_EQ(r.finish(), "");
  EXPECT_FALSE(r.found_turn_end());
  ChatReplyText tail("</s>");
  EXPECT_EQ(tail.push("end </"), "end ");
  EXPECT_EQ(tail.finish(), "</");  // the held-back rest comes out at the end
}

TEST(ChatSession, ReplyTextKeepsCharactersWhole) {
  ChatReplyText r("");
  EXPECT_EQ(r.push(" \xE2\x80"), "");  // the first two bytes of U+2019
  EXPECT_EQ(r.push("\x99s"), "\xE2\x80\x99s");
  EXPECT_EQ(r.push("   "), "   ");      // only the first leading space goes
  EXPECT_EQ(r.finish(), "");
}

class ChatSessionOnStories : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = test::shared_path("models/stories260K.gguf");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "missing " << path;
    m_ = std::make_unique<test::TestModel>(test::load_test_model(path.string(), 512));
  }
  ChatSession session(const std::string& system = "") {
    return ChatSession(*m_->model, *m_->tokenizer, ChatTemplate::builtin("chatml"), chat_template_context(*m_->tokenizer),
                       system);
  }
  static GenerationOptions greedy(int32_t n, Strategy s = Strategy::Ar) {
    GenerationOptions o;
    o.n_predict = n;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    return o;
  }
  std::unique_ptr<test::TestModel> m_;  // set in SetUp
};

TEST_F(ChatSessionOnStories, TurnsReuseTheCacheAndStream) {
  ChatSession chat = session("You tell stories.");
  EXPECT_EQ(chat.turn_end(), "<|im_end|>");
  std::string streamed;
  const ChatTurnResult first = chat.turn("Once upon a time", greedy(30), [&](const std::string& t) { streamed += t; });
  EXPECT_EQ(first.reused, 0);
  EXPECT_EQ(first.new_tokens, first.prompt_tokens);
  EXPECT_EQ(first.stop, ChatStop::Length);
  EXPECT_EQ(first.generation.ids.size(), 30u);
  const size_t begin = first.reply.find_first_not_of(' ');
  EXPECT_EQ(streamed, first.reply.substr(begin));
  EXPECT_FALSE(streamed.empty());
  ASSERT_EQ(chat.history().size(), 3u);  // system, user, assistant
  EXPECT_EQ(chat.history()[2].content, first.reply);

  const int32_t after_first = m_->model->n_past();
  const ChatTurnResult second = chat.turn("Tell me about the dog", greedy(20));
  EXPECT_EQ(second.reused, after_first) << "the first turn's tokens stay in the cache";
  EXPECT_LT(second.new_tokens, second.prompt_tokens);
  EXPECT_EQ(chat.history().size(), 5u);

  // The same conversation from scratch, with FAFO: the same replies (lossless), and the
  // step callback sees the decoding.
  ChatSession again = session("You tell stories.");
  int steps = 0;
  GenerationOptions fafo = greedy(30, Strategy::Fafo);
  fafo.on_step = [&](const StepTrace&) { ++steps; };
  EXPECT_EQ(again.turn("Once upon a time", fafo).reply, first.reply);
  EXPECT_GT(steps, 0);
  EXPECT_EQ(again.turn("Tell me about the dog", greedy(20, Strategy::Fafo)).reply, second.reply);
}

// A drafter reads the whole conversation, not only the new turn: the target drafting
// for itself has every draft accepted in the second turn too.
TEST_F(ChatSessionOnStories, ADrafterReadsTheWholeConversation) {
  const auto path = test::shared_path("models/stories260K.gguf");
  std::shared_ptr<Sequence> self(std::move(test::load_test_model(path.string(), 512).model));
  ChatSession plain = session("You tell stories.");
  ChatSession drafted = session("You tell stories.");
  GenerationOptions draft = greedy(40, Strategy::Draft);
  draft.resources.draft_model = self;
  draft.decoding.draft_n = 4;
  for (const char* text : {"Once upon a time", "Tell me about the dog", "And then?"}) {
    const ChatTurnResult want = plain.turn(text, greedy(40));
    const ChatTurnResult got = drafted.turn(text, draft);
    EXPECT_EQ(got.reply, want.reply) << text;
    const int32_t n = static_cast<int32_t>(got.generation.ids.size());
    EXPECT_EQ(got.generation.n_steps, 1 + (n - 1 + 4) / 5) << text << ": every draft accepted";
  }
}

TEST_F(ChatSessionOnStories, StopFlagEndsTheReplyWhichStaysInTheConversation) {
  ChatSession chat = session();
  int tokens = 0;
  const ChatTurnResult r = chat.turn("Once upon a time", greedy(100), {}, [&] { return ++tokens > 5; });
  EXPECT_EQ(r.stop, ChatStop::Stopped);
  EXPECT_LE(r.generation.ids.size(), 6u);
  ASSERT_EQ(chat.history().size(), 2u);
  EXPECT_EQ(chat.history()[1].content, r.reply);
  // The conversation goes on from there.
  EXPECT_GT(chat.turn("And then?", greedy(5)).reused, 0);
}

TEST_F(ChatSessionOnStories, ResetStartsOverWithAnEmptyCache) {
  ChatSession chat = session("sys");
  chat.turn("Once upon a time", greedy(10));
  EXPECT_GT(m_->model->n_past(), 0);
  chat.set_system("other");
  chat.reset();
  EXPECT_EQ(m_->model->n_past(), 0);
  ASSERT_EQ(chat.history().size(), 1u);
  EXPECT_EQ(chat.history()[0].content, "other");
  EXPECT_EQ(chat.turn("Once upon a time", greedy(10)).reused, 0);
}

TEST_F(ChatSessionOnStories, FullContextAndRefusedTemplatesAreErrors) {
  ChatSession chat = session();
  try {
    chat.turn(std::string(8000, 'a'), greedy(10));
    FAIL() << "a turn longer than the context ran";
  } catch (const ChatTurnError& e) {
    EXPECT_EQ(e.kind(), ChatTurnError::Kind::ContextFull);
    EXPECT_NE(std::string(e.what()).find("the context is full"), std::string::npos) << e.what();
  }
  EXPECT_EQ(chat.history().size(), 0u) << "the message that could not run is not in the conversation";

  // A template that refuses system messages, as Gemma's does.
  const char* source = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                       "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}";
  ChatSession refusing(*m_->model, *m_->tokenizer, ChatTemplate::from_source(source, "strict"),
                       chat_template_context(*m_->tokenizer), "a system text");
  EXPECT_THROW(refusing.check_template(), ChatTemplateError);
  try {
    refusing.turn("hi", greedy(5));
    FAIL() << "the template accepted a system message";
  } catch (const ChatTurnError& e) {
    EXPECT_EQ(e.kind(), ChatTurnError::Kind::TemplateRefused);
    EXPECT_NE(std::string(e.what()).find("the chat template (strict) refuses this conversation: System role not supported"),
              std::string::npos)
        << e.what();
  }
}

// A conversation longer than the context keeps going: the oldest turns after the system
// message leave until the conversation takes at most half of what the reply's room (100
// tokens) leaves of the 512, and the reply after a shift is exactly
// what a new session on the shortened conversation gives. A turn that cannot fit even
// alone is refused and the conversation kept; with the shift off, a full context refuses.
TEST_F(ChatSessionOnStories, AFullContextShiftsOutTheOldestTurnsExactly) {
  ChatSession chat = session("You tell stories.");
  test::TestModel other = test::load_test_model(test::shared_path("models/stories260K.gguf").string(), 512);
  int shifts = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string user = "Tell me story number " + std::to_string(i);
    const size_t turns_before = chat.history().size();
    const ChatTurnResult r = chat.turn(user, greedy(100));
    ASSERT_TRUE(r.in_history);
    EXPECT_LE(m_->model->n_past(), 512);
    if (r.shifted_turns == 0) {
      EXPECT_EQ(chat.history().size(), turns_before + 2);
      continue;
    }
    ++shifts;
    EXPECT_EQ(chat.history().size(), turns_before + 2 - 2 * static_cast<size_t>(r.shifted_turns));
    EXPECT_EQ(chat.history()[0].role, "system");
    EXPECT_EQ(chat.history()[1].role, "user");
    EXPECT_GT(r.shift_tokens_before, r.shift_tokens_after);
    EXPECT_LE(r.shift_tokens_after, (512u - 100) / 2) << "half of what the reply leaves is free after a shift";
    EXPECT_EQ(r.reused, 0) << "prefilled again from an empty cache";
    const std::vector<ChatMessage> base(chat.history().begin(), chat.history().end() - 2);
    ChatSession fresh(*other.model, *other.tokenizer, ChatTemplate::builtin("chatml"), chat_template_context(*other.tokenizer));
    fresh.restore(base);
    EXPECT_EQ(fresh.turn(user, greedy(100)).reply, r.reply) << "turn " << i;
  }
  EXPECT_GE(shifts, 2);
  const size_t kept = chat.history().size();
  try {
    chat.turn(std::string(3000, 'a'), greedy(10));
    FAIL() << "a turn longer than the context ran";
  } catch (const ChatTurnError& e) {
    EXPECT_EQ(e.kind(), ChatTurnError::Kind::ContextFull);
    EXPECT_NE(std::string(e.what()).find("even with every earlier turn left out"), std::string::npos) << e.what();
  }
  EXPECT_EQ(chat.history().size(), kept) << "the conversation is kept";
  EXPECT_FALSE(chat.turn("And then?", greedy(20)).reply.empty()) << "and goes on";

  ChatSession strict = session("You tell stories.");
  strict.set_context_shift(false);
  bool refused = false;
  for (int i = 0; i < 16 && !refused; ++i) {
    try {
      strict.turn("Tell me story number " + std::to_string(i), greedy(100));
    } catch (const ChatTurnError& e) {
      EXPECT_EQ(e.kind(), ChatTurnError::Kind::ContextFull);
      EXPECT_NE(std::string(e.what()).find("no context shift"), std::string::npos) << e.what();
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
}

// A shift keeps as much of the conversation as half the room the reply leaves holds:
// (512 - 80) / 2 = 216 tokens with 80-token replies, the other half free for the turns
// to come. It drops the fewest oldest turns that bring the rendering within that, so
// with one turn fewer dropped the rendering would not have fit.
TEST_F(ChatSessionOnStories, AShiftKeepsHalfOfTheRoomBesideTheReply) {
  ChatSession chat = session();
  GenerationOptions o = greedy(80);
  o.stop_at_end_of_generation = false;
  const Tokenizer& tok = *m_->tokenizer;
  const ChatTemplate chatml = ChatTemplate::builtin("chatml");
  const ChatTemplateContext ctx = chat_template_context(tok);
  auto tokens = [&](const std::vector<ChatMessage>& messages) {
    const std::string text = chatml.render(messages, true, ctx);
    return tok.encode(text, false, true).size() + (chat_needs_bos(tok, ctx, text) ? 1 : 0);
  };
  const size_t keep = (512 - 80) / 2;
  int shifts = 0;
  for (int i = 0; i < 12; ++i) {
    const std::vector<ChatMessage> before = chat.history();
    const std::string user = "Tell me story number " + std::to_string(i);
    const ChatTurnResult r = chat.turn(user, o);
    ASSERT_TRUE(r.in_history);
    EXPECT_EQ(r.generation.ids.size(), 80u);
    if (r.shifted_turns == 0) continue;
    ++shifts;
    EXPECT_LE(r.shift_tokens_after, keep) << "turn " << i;
    // No system message: every two messages are a turn. The last turn that left, back.
    std::vector<ChatMessage> one_more(before.begin() + 2 * (r.shifted_turns - 1), before.end());
    one_more.push_back({"user", user});
    EXPECT_GT(tokens(one_more), keep) << "turn " << i << ": a shift drops no more turns than it must";
  }
  EXPECT_GE(shifts, 2);
}

// A reply never reserves more than half the context, whatever n_predict asks: in a
// context of 512 tokens, n_predict 1000 answers (at most 256 tokens) instead of refusing
// every turn. A turn refused for a full context carries its numbers.
TEST_F(ChatSessionOnStories, AReplyReservesAtMostHalfTheContext) {
  ChatSession chat = session();
  EXPECT_EQ(chat.reply_limit(1000), 256);
  EXPECT_EQ(chat.reply_limit(100), 100);
  EXPECT_EQ(chat.reply_limit(-1), -1);
  GenerationOptions o = greedy(1000);
  o.stop_at_end_of_generation = false;
  // A reply's room of half the context: a shift keeps a quarter of it for the
  // conversation, which a 256-token reply outgrows, so every turn after the first shifts.
  int shifts = 0;
  for (int i = 0; i < 3; ++i) {
    const ChatTurnResult r = chat.turn("Tell me a story", o);
    ASSERT_TRUE(r.in_history);
    EXPECT_LE(r.generation.ids.size(), 256u);
    EXPECT_LE(m_->model->n_past(), 512);
    if (r.shifted_turns > 0) {
      ++shifts;
      EXPECT_LE(r.shift_tokens_after, 128u) << "turn " << i;
    }
  }
  EXPECT_EQ(shifts, 2);
  try {
    chat.turn(std::string(3000, 'a'), greedy(10));
    FAIL() << "a turn longer than the context ran";
  } catch (const ChatTurnError& e) {
    EXPECT_EQ(e.kind(), ChatTurnError::Kind::ContextFull);
    EXPECT_GT(e.need().turn_tokens, 512);
    EXPECT_EQ(e.need().reply_tokens, 10);
    EXPECT_EQ(e.need().n_ctx, 512);
  }
}

// n_predict 0 is unlimited, as n_predict <= 0 is: the generator, which would make no
// token for 0, is asked for -1, so the turn is answered and joins the conversation.
TEST_F(ChatSessionOnStories, NPredictZeroIsUnlimitedNotNoReply) {
  ChatSession chat = session();
  EXPECT_EQ(chat.reply_limit(0), -1);
  EXPECT_EQ(chat.reply_limit(-5), -1);
  for (const char* text : {"Once upon a time", "And then?"}) {
    const ChatTurnResult r = chat.turn(text, greedy(0));
    ASSERT_TRUE(r.in_history) << text;
    EXPECT_FALSE(r.generation.ids.empty()) << text;
    EXPECT_NE(r.stop, ChatStop::Length) << text << ": no length limit";
    // (The first reply may fill the context: the second turn then shifts it out.)
    ASSERT_GE(chat.history().size(), 2u);
    EXPECT_EQ(chat.history().end()[-2].content, text);
    EXPECT_EQ(chat.history().back().content, r.reply);
  }
}

// A template that amplifies stops at the cap the context gives: the turn is refused,
// saying so, and the conversation is kept.
TEST_F(ChatSessionOnStories, AHostileTemplateIsRefusedAndTheConversationKept) {
  ChatSession chat = session();
  chat.turn("Once upon a time", greedy(8));
  ChatSession hostile(*m_->model, *m_->tokenizer,
                      ChatTemplate::from_source("{% for m in messages %}{% for i in range(100000) %}{{ 'x' * 1000 }}"
                                                "{% endfor %}{% endfor %}",
                                                "hostile"),
                      chat_template_context(*m_->tokenizer));
  try {
    hostile.turn("hi", greedy(4));
    FAIL() << "a 100 MB rendering ran";
  } catch (const ChatTurnError& e) {
    EXPECT_EQ(e.kind(), ChatTurnError::Kind::TemplateRefused);
    EXPECT_NE(std::string(e.what()).find("the chat template (hostile) costs too much"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a context of 512 tokens caps a rendering at 1048576 bytes"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(hostile.history().empty());
}

// Long sampled replies (which sometimes contain a BOS where the story model starts a
// new story) stay in the cache whole: the next turn reuses every fed token.
TEST_F(ChatSessionOnStories, LongSampledRepliesStayInTheCache) {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u, 6u}) {
    ChatSession chat = session();
    GenerationOptions o = greedy(400);
    o.sampling.temperature = 0.8f;
    o.sampling.seed = seed;
    const ChatTurnResult first = chat.turn("Once upon a time", o);
    const ChatTurnResult second = chat.turn("The end", greedy(5));
    EXPECT_EQ(second.reused, static_cast<int32_t>(first.prompt_tokens + first.generation.ids.size()) - 1)
        << "seed " << seed << ", stop " << chat_stop_text(first.stop) << ", reply: " << first.reply;
  }
}
