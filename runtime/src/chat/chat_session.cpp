// ChatSession: a conversation over a kept KV cache (see fafo/chat_session.h).
#include "fafo/chat_session.h"

#include <algorithm>
#include <utility>

namespace fafo {

const char* chat_stop_text(ChatStop s) {
  switch (s) {
    case ChatStop::EndOfTurn: return "end of turn";
    case ChatStop::EndOfGeneration: return "end of generation";
    case ChatStop::ContextFull: return "context full";
    case ChatStop::Length: return "length";
    case ChatStop::Stopped: return "stopped";
  }
  return "unknown";
}

ChatTemplateContext chat_template_context(const Tokenizer& tokenizer) {
  ChatTemplateContext ctx;
  const Vocab& v = tokenizer.vocab();
  if (v.bos >= 0) ctx.bos_token = v.tokens[static_cast<size_t>(v.bos)];
  if (v.eos >= 0) ctx.eos_token = v.tokens[static_cast<size_t>(v.eos)];
  return ctx;
}

// ---- the reply's text -----------------------------------------------------------------

ChatReplyText::ChatReplyText(std::string turn_end) : marker_(std::move(turn_end)) {}

std::string ChatReplyText::push(const std::string& piece) {
  if (found_) return "";
  text_ += piece;
  size_t safe = text_.size();
  if (!marker_.empty()) {
    const size_t at = text_.find(marker_, shown_ > marker_.size() ? shown_ - marker_.size() : 0);
    if (at != std::string::npos) {
      found_ = true;
      text_.resize(at);
      safe = at;
    } else {
      // Hold back a tail that is a prefix of the marker.
      for (size_t n = std::min(marker_.size() - 1, text_.size()); n > 0; --n) {
        if (text_.compare(text_.size() - n, n, marker_, 0, n) == 0) {
          safe = text_.size() - n;
          break;
        }
      }
    }
  }
  std::string out = safe > shown_ ? text_.substr(shown_, safe - shown_) : "";
  shown_ = std::max(shown_, safe);
  return display(std::move(out));
}

std::string ChatReplyText::finish() {
  std::string out = text_.size() > shown_ ? text_.substr(shown_) : "";
  shown_ = text_.size();
  return display(std::move(out)) + utf8_.flush();
}

std::string ChatReplyText::display(std::string text) {
  if (at_start_) {
    const size_t begin = text.find_first_not_of(' ');
    text = begin == std::string::npos ? "" : text.substr(begin);
    if (!text.empty()) at_start_ = false;
  }
  return utf8_.push(text);
}

// ---- the session ------------------------------------------------------------------------

ChatSession::ChatSession(Sequence& model, const Tokenizer& tokenizer, ChatTemplate chat_template,
                         ChatTemplateContext context, std::string system)
    : model_(model), tok_(tokenizer), template_(std::move(chat_template)), ctx_(std::move(context)),
      system_(std::move(system)), turn_end_(template_.assistant_turn_end(ctx_)) {
  reset();
}

bool chat_needs_bos(const Tokenizer& tokenizer, const ChatTemplateContext& context, const std::string& rendered) {
  const Vocab& vocab = tokenizer.vocab();
  return vocab.add_bos && vocab.bos >= 0 && !(!context.bos_token.empty() && rendered.starts_with(context.bos_token));
}

void ChatSession::reset() {
  history_.clear();
  if (!system_.empty()) history_.push_back({"system", system_});
  pieces_.clear();
  model_.truncate(0);
}

void ChatSession::restore(std::vector<ChatMessage> history) {
  history_ = std::move(history);
  pieces_.clear();
  model_.truncate(0);
}

void ChatSession::check_template() const {
  std::vector<ChatMessage> probe = history_;
  probe.push_back({"user", "Hello"});
  template_.render(probe, true, ctx_, chat_rendering_cap(model_.n_ctx()));
}

std::string ChatSession::render_turn(const std::vector<ChatMessage>& messages) const {
  try {
    return template_.render(messages, true, ctx_, chat_rendering_cap(model_.n_ctx()));
  } catch (const ChatTemplateError& e) {
    throw ChatTurnError(ChatTurnError::Kind::TemplateRefused,
                        chat_template_refusal(template_, e, model_.n_ctx(), "this conversation"));
  }
}

int32_t ChatSession::reply_limit(int32_t n_predict) const {
  if (n_predict <= 0) return -1;  // the generator's "unlimited": its 0 makes no token at all
  return std::min(n_predict, std::max(1, model_.n_ctx() / 2));
}

size_t ChatSession::rendering_tokens(const std::string& prompt) const {
  return tok_.encode(prompt, false, true).size() + (chat_needs_bos(tok_, ctx_, prompt) ? 1 : 0);
}

ChatTurnResult ChatSession::turn(const std::string& user_text, const GenerationOptions& options,
                                 const TextCallback& on_text, const StopFlag& should_stop) {
  // The conversation this turn continues: history_, or what is left of it after a shift
  // (it replaces history_ only when the turn has run).
  std::vector<ChatMessage> base = history_;
  std::vector<ChatMessage> messages = base;
  messages.push_back({"user", user_text});
  std::string prompt = render_turn(messages);
  Prefill prefill = plan_prefill(prompt);
  const int64_t n_ctx = model_.n_ctx();
  const int32_t limit = reply_limit(options.n_predict);
  const int64_t room = limit > 0 ? limit : 1;  // the reply's tokens
  ChatTurnResult r;
  if (static_cast<int64_t>(prefill.reused) + static_cast<int64_t>(prefill.ids.size()) + room > n_ctx) {
    const size_t first = !base.empty() && base.front().role == "system" ? 1 : 0;
    size_t tokens = rendering_tokens(prompt);
    const size_t before = tokens;
    int32_t dropped = 0;
    // Whole turns from the oldest: a user message and the replies after it, until the
    // rendering takes at most half of what the reply's room leaves of the context; the
    // other half is free for the turns to come.
    const int64_t keep = (n_ctx - room) / 2;
    while (context_shift_ && base.size() > first && static_cast<int64_t>(tokens) > keep) {
      size_t end = first + 1;
      while (end < base.size() && base[end].role != "user") ++end;
      base.erase(base.begin() + static_cast<std::ptrdiff_t>(first), base.begin() + static_cast<std::ptrdiff_t>(end));
      ++dropped;
      messages = base;
      messages.push_back({"user", user_text});
      prompt = render_turn(messages);
      tokens = rendering_tokens(prompt);
    }
    if (static_cast<int64_t>(tokens) + room > n_ctx)
      throw ChatTurnError(ChatTurnError::Kind::ContextFull,
                          "the context is full: this turn needs " + std::to_string(tokens) + " tokens" +
                              (context_shift_ ? " even with every earlier turn left out" : "") + ", and " +
                              std::to_string(room) + " for the reply; the context holds " + std::to_string(n_ctx) +
                              (context_shift_ ? "" : " (no context shift: no turn leaves the conversation)"),
                          ChatTurnError::Need{static_cast<int64_t>(tokens), room, n_ctx});
    // Prefilled again from an empty cache, as a new session on `base` would.
    pieces_.clear();
    model_.truncate(0);
    prefill = plan_prefill(prompt);
    r.shifted_turns = dropped;
    r.shift_tokens_before = before;
    r.shift_tokens_after = tokens;
  }
  // What the cache holds before this turn, to return to if the turn fails or is stopped
  // before its reply: the kept pieces as they are now (a reply's last token is not in
  // the cache until this turn feeds it).
  const std::vector<CachedPiece> kept(pieces_.begin(), pieces_.begin() + static_cast<std::ptrdiff_t>(prefill.kept_pieces));
  auto roll_back = [&] {
    pieces_.clear();
    int32_t held = 0;  // the kept pieces' entries, up to the `reused` this turn started from
    for (const CachedPiece& piece : kept) {
      const int32_t n = piece.in_cache ? static_cast<int32_t>(piece.ids.size()) : 0;
      if (held + n > prefill.reused) break;
      pieces_.push_back(piece);
      held += n;
    }
    try {
      model_.truncate(held);
    } catch (...) {  // window rings overwritten past `held` (or a failing backend): the next turn feeds everything
      pieces_.clear();
    }
  };
  apply(prefill);

  GenerationOptions g = options;
  g.keep_context = true;
  g.n_predict = limit;
  if (should_stop) {
    g.should_stop = [&should_stop, caller = options.should_stop] { return should_stop() || (caller && caller()); };
  }
  for (const CachedPiece& piece : pieces_) {  // what the cache holds: the first `reused` ids
    if (g.context_ids.size() >= static_cast<size_t>(prefill.reused)) break;
    g.context_ids.insert(g.context_ids.end(), piece.ids.begin(), piece.ids.end());
  }
  g.context_ids.resize(static_cast<size_t>(prefill.reused));
  ChatReplyText reply(turn_end_);
  bool stopped = false;
  auto show = [&](const std::string& text) {
    if (on_text && !text.empty()) on_text(text);
  };
  auto on_token = [&](int32_t id) {
    if (should_stop && should_stop()) {
      stopped = true;
      return false;
    }
    if (tok_.is_end_of_generation(id) || tok_.is_control(id)) return true;
    show(reply.push(tok_.token_to_piece(id)));
    return !reply.found_turn_end();
  };
  try {
    r.generation = generate(model_, tok_, prefill.ids, g, on_token);
  } catch (...) {
    roll_back();  // the conversation is as it was; the message is not part of it
    throw;
  }
  if (r.generation.ids.empty()) {  // stopped before the reply began
    roll_back();
    r.stop = ChatStop::Stopped;
    r.in_history = false;
    r.shifted_turns = 0;  // the conversation is as it was: the next turn shifts again
    return r;
  }
  show(reply.finish());
  stopped = stopped || r.generation.stop == StopReason::Cancelled;  // the generator's own check saw the flag

  // What the cache now holds, with the text each token stands for in the next
  // rendering. A control token inside the reply (a BOS a story model starts a new story
  // with) is in the cache but not in the reply's text: it stands for no text. The last
  // token keeps its special text, which the template may write after the reply ("</s>").
  const std::vector<int32_t>& ids = r.generation.ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    const bool last = i + 1 == ids.size();
    const bool control = tok_.is_control(id) || tok_.is_end_of_generation(id);
    pieces_.push_back({control && !last ? std::string() : tok_.token_to_piece(id, control), {id}, !last});
  }
  history_ = std::move(base);
  history_.push_back({"user", user_text});
  history_.push_back({"assistant", reply.text()});

  r.reply = reply.text();
  r.new_tokens = prefill.ids.size();
  r.reused = prefill.reused;
  r.prompt_tokens = prefill.ids.size() + static_cast<size_t>(prefill.reused);
  r.stop = stopped                                                   ? ChatStop::Stopped
           : reply.found_turn_end()                                  ? ChatStop::EndOfTurn
           : r.generation.stop == StopReason::EndOfGeneration         ? ChatStop::EndOfGeneration
           : r.generation.stop == StopReason::ContextFull             ? ChatStop::ContextFull
                                                                      : ChatStop::Length;
  return r;
}

// Finds the cached pieces whose texts, in order, start `prompt`, and tokenizes the rest
// of it. Changes nothing: apply() does.
ChatSession::Prefill ChatSession::plan_prefill(const std::string& prompt) const {
  Prefill p = plan_prefill(prompt, pieces_.size());
  // A cache whose sliding-window rings were overwritten past the kept context (a
  // conversation rewound by more than a step) is fed again from the start.
  if (model_.reusable(p.reused) < p.reused) p = plan_prefill(prompt, 0);
  return p;
}

ChatSession::Prefill ChatSession::plan_prefill(const std::string& prompt, size_t most_pieces) const {
  Prefill p;
  size_t matched_text = 0;
  while (p.kept_pieces < most_pieces &&
         prompt.compare(matched_text, pieces_[p.kept_pieces].text.size(), pieces_[p.kept_pieces].text) == 0) {
    const CachedPiece& piece = pieces_[p.kept_pieces++];
    matched_text += piece.text.size();
    if (piece.in_cache) {
      p.reused += static_cast<int32_t>(piece.ids.size());
    } else {
      p.ids.insert(p.ids.end(), piece.ids.begin(), piece.ids.end());  // a reply's last token, fed now
    }
  }
  p.rest.text = prompt.substr(matched_text);
  p.rest.ids = tok_.encode(p.rest.text, false, true);
  // A conversation starts with BOS unless the template wrote it already.
  if (p.kept_pieces == 0 && chat_needs_bos(tok_, ctx_, prompt)) p.rest.ids.insert(p.rest.ids.begin(), tok_.vocab().bos);
  p.ids.insert(p.ids.end(), p.rest.ids.begin(), p.rest.ids.end());
  if (p.ids.empty() && p.kept_pieces > 0) {
    // Everything is cached already: feed the last piece again so that there are
    // logits to sample the reply's first token from.
    const CachedPiece& last = pieces_[p.kept_pieces - 1];
    p.reused -= static_cast<int32_t>(last.ids.size());
    p.ids = last.ids;
  }
  return p;
}

// Truncates the KV cache to the kept pieces and records what the prefill adds.
void ChatSession::apply(const Prefill& p) {
  pieces_.resize(p.kept_pieces);
  for (CachedPiece& piece : pieces_) piece.in_cache = true;
  if (!p.rest.text.empty() || !p.rest.ids.empty()) pieces_.push_back(p.rest);
  model_.truncate(p.reused);
}

}  // namespace fafo
