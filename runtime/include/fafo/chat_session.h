// A multi-turn chat with a model: the conversation, rendered with a chat template on
// every turn, and a KV cache kept across turns.
//
// Each turn renders the whole conversation (with the generation prompt), matches the
// rendering against the text of what the KV cache already holds, keeps the longest
// matching part and prefills only the rest, so a turn normally costs only its new
// tokens. The reply streams through a callback as displayable text (whole UTF-8
// characters, SentencePiece's leading space dropped, the template's turn-end text
// held back and cut off) and ends at an end-of-generation token, at the turn-end
// text, at n_predict tokens, at a full context, or when the caller's stop flag is set.
//
// The reply's room: a reply is at most n_predict tokens and never more than half the
// context (reply_limit()), so that a turn always has the other half; unlimited
// (n_predict <= 0) reserves one token and the reply ends at a full context.
//
// Context shift: when a new turn and the reply's room would not fit in the context,
// the oldest turns after the system message leave the conversation, whole
// user-assistant pairs, the fewest that bring the rendering within half of what the
// reply's room leaves of the context ((n_ctx - room) / 2; the other half is free for
// the turns to come: with a reply's room of half the context, only a quarter, which a
// long reply fills, so the next turn shifts again), and the rest is prefilled again
// from an empty cache, exactly as a new session on the shortened conversation would
// (restore()). A turn that cannot fit even alone is refused
// (ChatTurnError::Kind::ContextFull, with the numbers) and the conversation is kept.
// set_context_shift(false) refuses instead.
//
// Who uses it: `fafo chat` (app/cli/cmd_chat.cpp) and fafo-studio's chat view, which
// runs turns on a worker thread. Not thread-safe: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fafo/chat_template.h"
#include "fafo/generator.h"
#include "fafo/sequence.h"
#include "fafo/tokenizer.h"
#include "fafo/utf8_stream.h"

namespace fafo {

// Why a reply ended.
enum class ChatStop { EndOfTurn, EndOfGeneration, ContextFull, Length, Stopped };
// "end of turn", "end of generation", "context full", "length", "stopped".
const char* chat_stop_text(ChatStop s);

// A turn that could not run; the message is not part of the conversation then.
class ChatTurnError : public std::runtime_error {
 public:
  enum class Kind { TemplateRefused, ContextFull };
  // What a ContextFull refusal measured (all 0 for TemplateRefused): the turn's
  // rendering (with every earlier turn left out, when the context shift is on), the
  // reply's room and the context's length, in tokens.
  struct Need {
    int64_t turn_tokens = 0, reply_tokens = 0, n_ctx = 0;
  };
  ChatTurnError(Kind kind, const std::string& message, Need need)
      : std::runtime_error(message), kind_(kind), need_(need) {}
  // (Not a default argument: GCC 12 cannot default a nested struct with member
  // initializers inside the enclosing class.)
  ChatTurnError(Kind kind, const std::string& message) : ChatTurnError(kind, message, Need{}) {}
  Kind kind() const { return kind_; }
  const Need& need() const { return need_; }

 private:
  Kind kind_;
  Need need_;
};

struct ChatTurnResult {
  std::string reply;            // the assistant's text, as it joins the conversation
  GenerationResult generation;  // ids, speed, steps (tau = generation.tokens_per_step())
  size_t prompt_tokens = 0;     // tokens of this turn's rendering: reused + fed
  size_t new_tokens = 0;        // tokens prefilled this turn
  int32_t reused = 0;           // tokens that were already in the KV cache
  ChatStop stop = ChatStop::Length;
  // false: stopped before the reply began (during the prompt's prefill); the message
  // and an empty reply are then not part of the conversation.
  bool in_history = true;
  // A context shift before this turn: the turns (user-assistant pairs) that left the
  // conversation, and its rendering's tokens before and after (0, 0, 0: none).
  int32_t shifted_turns = 0;
  size_t shift_tokens_before = 0, shift_tokens_after = 0;
};

// The BOS / EOS texts a chat template renders with, from the tokenizer's vocabulary.
ChatTemplateContext chat_template_context(const Tokenizer& tokenizer);
// Whether a conversation rendered as `rendered` starts with a BOS token the text does not
// hold: the vocabulary adds one and the template did not write it already. ChatSession and
// `fafo serve` both follow it.
bool chat_needs_bos(const Tokenizer& tokenizer, const ChatTemplateContext& context, const std::string& rendered);

class ChatSession {
 public:
  // Borrows the model and tokenizer (they must outlive the session). `system` starts
  // every conversation when not empty. Starts a new conversation (empties the cache).
  ChatSession(Sequence& model, const Tokenizer& tokenizer, ChatTemplate chat_template, ChatTemplateContext context,
              std::string system = "");

  // A new conversation: only the system message, an empty KV cache.
  void reset();
  // The system message of the next conversation (after reset()).
  void set_system(std::string system) { system_ = std::move(system); }
  // Throws ChatTemplateError when the template cannot render a first user message.
  void check_template() const;
  // Whether a turn that would not fit drops the oldest turns (the default) or is refused.
  void set_context_shift(bool on) { context_shift_ = on; }
  bool context_shift() const { return context_shift_; }
  // The most tokens a reply asked for with `n_predict` gets: n_predict, but at most half
  // the context (at least 1); n_predict <= 0 (unlimited, 0 included) gives -1, which the
  // generator reads as unlimited (its n_predict 0 would make no token).
  int32_t reply_limit(int32_t n_predict) const;

  using TextCallback = std::function<void(const std::string& text)>;
  using StopFlag = std::function<bool()>;
  // One exchange: `user_text`, then the model's reply generated with `options`
  // (keep_context is set by the session; on_step, strategy, sampling are the caller's;
  // n_predict is the caller's up to reply_limit()). Throws ChatTurnError when the turn cannot run. Generation errors
  // (fafo::DeviceError, a model file that changed, ...) propagate with the session as
  // it was before the turn: the conversation kept, the cache consistent, ready for
  // another turn. A stopped reply joins the conversation as far as it got; one stopped
  // before its first token does not (ChatTurnResult::in_history). `should_stop` is
  // asked before every prefill chunk, every step and every token.
  ChatTurnResult turn(const std::string& user_text, const GenerationOptions& options, const TextCallback& on_text = {},
                      const StopFlag& should_stop = {});

  const std::vector<ChatMessage>& history() const { return history_; }
  // Continues `history` (a conversation kept from another session, e.g. before the
  // model was opened again): the next turn renders and prefills all of it.
  void restore(std::vector<ChatMessage> history);
  const std::string& turn_end() const { return turn_end_; }
  const std::string& template_name() const { return template_.name(); }
  Sequence& model() { return model_; }

 private:
  // Token ids the conversation has fed or produced, each group with the text it stands
  // for, in order. All but possibly the last group are in the KV cache: the last token
  // of a reply is sampled but not fed back (see generate()).
  struct CachedPiece {
    std::string text;
    std::vector<int32_t> ids;
    bool in_cache = true;
  };
  // What a turn feeds: the cached pieces it keeps, then `ids`.
  struct Prefill {
    size_t kept_pieces = 0;    // pieces_[0, kept_pieces) start the new rendering
    int32_t reused = 0;        // KV entries they hold (the rest of the cache is dropped)
    std::vector<int32_t> ids;  // to feed after them: a kept piece not yet in the cache, then `rest`
    CachedPiece rest;          // the new text of the rendering and its tokens
  };
  Prefill plan_prefill(const std::string& prompt) const;
  // The plan keeping at most `most_pieces` cached pieces.
  Prefill plan_prefill(const std::string& prompt, size_t most_pieces) const;
  // Tokens of a whole rendering fed from an empty cache (BOS included where added).
  size_t rendering_tokens(const std::string& prompt) const;
  // Renders `messages` with the generation prompt; a template's refusal is a ChatTurnError.
  std::string render_turn(const std::vector<ChatMessage>& messages) const;
  void apply(const Prefill& p);

  Sequence& model_;
  const Tokenizer& tok_;
  ChatTemplate template_;
  ChatTemplateContext ctx_;
  std::string system_;
  std::string turn_end_;
  std::vector<ChatMessage> history_;
  std::vector<CachedPiece> pieces_;
  bool context_shift_ = true;
};

// Turns a reply's generated pieces into text to show: cuts at the template's turn-end
// text (a model that writes "<|im_end|>" as plain text has finished), holding back a
// tail that might be the start of it; drops the space SentencePiece puts before the
// first word; never splits a UTF-8 character.
class ChatReplyText {
 public:
  explicit ChatReplyText(std::string turn_end);
  // Adds a generated piece; returns what can be shown now.
  std::string push(const std::string& piece);
  // The held-back rest, at the end of the reply.
  std::string finish();
  bool found_turn_end() const { return found_; }
  // The reply as generated (its leading space kept): everything before the turn-end text.
  const std::string& text() const { return text_; }

 private:
  std::string display(std::string text);  // drops the leading space, keeps characters whole
  std::string marker_;
  std::string text_;
  size_t shown_ = 0;
  bool found_ = false;
  bool at_start_ = true;
  Utf8Stream utf8_;
};

}  // namespace fafo
