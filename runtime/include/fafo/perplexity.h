// Perplexity of a model on a text, measured the way llama.cpp's llama-perplexity does,
// so the figures compare: the text's tokens are cut into chunks of n_ctx; each chunk is
// read from an empty context (its first token replaced by BOS when the model adds one)
// and only its second half is scored, each token predicted from at least n_ctx/2 tokens
// before it. The estimate is exp(mean negative log-likelihood) and its error the
// standard error of that mean carried through exp.
//
// Lossy modes are measured with the chunk's first half as the prompt: it is prefilled
// (SpecPC: after compressing it), then the second half is read (with --kv-drop: a token
// a step, each reading only the entries the policy keeps, as decoding does).
//
// With a base model (llama-perplexity's --kl-divergence, in one pass): the base reads
// every chunk the same way (without lossy modes), and every scored token also counts the
// KL divergence KL(base || model) of the two next-token distributions and whether their
// most likely tokens agree: how far a converted or quantized model is from its original.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fafo/kv_policy.h"
#include "fafo/sequence.h"
#include "fafo/prompt_compression.h"

namespace fafo {

struct PerplexityOptions {
  int32_t n_ctx = 0;          // chunk length (even, >= 4); 0: the model's context length
  int32_t max_chunks = -1;    // chunks scored at most; -1: every whole chunk of the text
  int32_t bos = -1;           // the BOS token each chunk starts with; -1: none
  // Lossy modes (GenerationOptions has the same): kv_drop with `kv`, prompt_compress;
  // the speckv ones read `draft`.
  KvPolicyOptions kv;
  bool kv_drop = false;
  PromptCompressOptions prompt_compress;
  Sequence* draft = nullptr;
  Sequence* base = nullptr;  // the model the KL divergence is measured from (same vocabulary); nullptr: none
};

struct PerplexityChunk {
  int32_t index = 0;          // 0-based
  int32_t n_chunks = 0;
  double running = 0.0;       // the estimate over chunks 0..index
  double seconds = 0.0;       // this chunk's time
};

struct PerplexityResult {
  double ppl = 0.0;
  double error = 0.0;         // +/- one standard error
  int64_t scored = 0;         // tokens scored
  int32_t chunks = 0;
  int32_t n_ctx = 0;
  double seconds = 0.0;
  std::vector<double> running;     // the estimate after each chunk
  std::vector<std::string> lossy;  // the lossy modes measured (empty: none)
  // With a base model: mean KL(base || model) in nats per scored token, its standard error,
  // and the fraction of scored tokens whose argmax both models share.
  double kl = 0.0, kl_error = 0.0, top1_agreement = 0.0;
};

// Throws std::invalid_argument for a text shorter than one chunk or bad options, and what
// the model throws.
PerplexityResult perplexity(Sequence& model, const std::vector<int32_t>& tokens, const PerplexityOptions& options,
                            const std::function<void(const PerplexityChunk&)>& on_chunk = {});

}  // namespace fafo
