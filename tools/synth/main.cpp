// fafo-synth: writes a GGUF model with random weights for any llama-like shape.
//   fafo-synth --preset llama3-8b --type Q4_K_M -o llama3-8b-q4km.gguf
//   fafo-synth --layers 3 --dim 96 --heads 6 --kv-heads 2 --ffn 200 --vocab 300 --type Q8_0 -o odd.gguf
#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "synthetic_model.h"

int main(int argc, char** argv) {
  using namespace fafo::synth;
  CLI::App app{"fafo-synth: write a GGUF model with random weights (llama-like shapes, any weight format)"};
  std::string out, preset_name;
  SyntheticConfig c;
  app.add_option("-o,--out", out, "Output GGUF path")->required();
  app.add_option("--preset", preset_name, "Start from a preset: llama3-8b, llama2-7b, tinyllama-1.1b, qwen2.5-0.5b, qwen3-8b, "
                 "qwen3-0.6b, phi3-mini, phi3.5-mini, phi4-mini, gemma2-9b, gemma2-2b, gemma3-4b, gemma3-1b, "
                 "qwen3-30b-a3b, gpt-oss-20b, tiny, qwen3-tiny, phi3-tiny, phi4-mini-tiny, gemma2-tiny, gemma3-tiny, "
                 "qwen3moe-tiny, gpt-oss-tiny, grid-tiny");
  // Values given explicitly override the preset: parse twice (once for the preset).
  auto* o_arch = app.add_option("--arch", c.arch, "llama, qwen2, qwen3, qwen3moe, gpt-oss, phi3, gemma2 or gemma3");
  auto* o_layers = app.add_option("--layers", c.n_layer, "Number of layers");
  auto* o_dim = app.add_option("--dim", c.n_embd, "Embedding size");
  auto* o_heads = app.add_option("--heads", c.n_head, "Attention heads");
  auto* o_kv = app.add_option("--kv-heads", c.n_head_kv, "KV heads (GQA when fewer than heads)");
  auto* o_head_dim = app.add_option("--head-dim", c.head_dim, "Head size (default: dim / heads)");
  auto* o_rope_dims = app.add_option("--rope-dims", c.rope_dims, "Rotated dimensions per head (default: the whole head)");
  auto* o_ffn = app.add_option("--ffn", c.n_ff, "Feed-forward size");
  auto* o_vocab = app.add_option("--vocab", c.n_vocab, "Vocabulary size (>= 259)");
  auto* o_ctx = app.add_option("--ctx", c.n_ctx, "Context length written to the metadata");
  auto* o_base = app.add_option("--rope-base", c.rope_base, "RoPE frequency base");
  auto* o_scaling = app.add_option("--rope-scaling", c.rope_scaling,
                                   "none, linear (rope.scaling.* metadata), llama3 (a rope_freqs.weight tensor, "
                                   "as in the Hub's Llama 3.1/3.2 GGUFs), longrope (phi3: short and long factors) or yarn "
                                   "(rope.scaling.* metadata with the original context)");
  auto* o_original = app.add_option("--rope-original-ctx", c.rope_original_ctx,
                                    "longrope: the context up to which the short factors hold; yarn: the context "
                                    "trained before scaling (default 4096)");
  auto* o_factor = app.add_option("--rope-factor", c.rope_scaling_factor, "RoPE scaling factor (default 8)");
  auto* o_tied = app.add_flag("--tied", c.tied_embeddings, "Tie the output matrix to the token embeddings");
  auto* o_type = app.add_option("-t,--type", c.weight_type,
                                "Weight format: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ3_XXS IQ3_S IQ4_NL IQ4_XS MXFP4, or the mixes Q4_K_M Q5_K_M MXFP4_MOE; also IQ2_XXS IQ2_XS as random codes (fafo reads these formats but does not quantize to them)");
  auto* o_seed = app.add_option("--seed", c.seed, "Random seed");
  auto* o_window = app.add_option("--sliding-window", c.sliding_window, "gemma2, gemma3, gpt-oss: the local layers' window");
  auto* o_pattern = app.add_option("--swa-pattern", c.swa_pattern,
                                   "gemma2, gemma3: every Nth layer is global (default: the family's, 2 or 6)");
  auto* o_vocab_from = app.add_option("--vocab-from", c.vocab_from,
                                      "Take the vocabulary (tokenizer.* keys) from this GGUF; --vocab is then its size");
  auto* o_experts = app.add_option("--experts", c.n_expert, "qwen3moe, gpt-oss: experts per layer (default 8)");
  auto* o_used = app.add_option("--experts-used", c.n_expert_used, "qwen3moe, gpt-oss: experts each token uses (default 2)");
  auto* o_expert_ffn = app.add_option("--expert-ffn", c.n_ff_exp, "qwen3moe, gpt-oss: each expert's feed-forward size (default 32)");
  auto* o_name = app.add_option("--name", c.name, "general.name (default: the preset's name, or \"synthetic\")");
  CLI11_PARSE(app, argc, argv);
  if (!preset_name.empty()) {
    auto p = preset(preset_name);
    if (!p) {
      std::fprintf(stderr, "fafo-synth: error: unknown preset '%s'\n", preset_name.c_str());
      return 1;
    }
    SyntheticConfig given = c;
    c = *p;
    auto keep = [](CLI::Option* o, auto& dst, const auto& src) {
      if (o->count() > 0) dst = src;
    };
    keep(o_arch, c.arch, given.arch), keep(o_layers, c.n_layer, given.n_layer), keep(o_dim, c.n_embd, given.n_embd);
    keep(o_heads, c.n_head, given.n_head), keep(o_kv, c.n_head_kv, given.n_head_kv), keep(o_ffn, c.n_ff, given.n_ff);
    keep(o_vocab, c.n_vocab, given.n_vocab), keep(o_ctx, c.n_ctx, given.n_ctx), keep(o_base, c.rope_base, given.rope_base);
    keep(o_scaling, c.rope_scaling, given.rope_scaling), keep(o_factor, c.rope_scaling_factor, given.rope_scaling_factor);
    keep(o_tied, c.tied_embeddings, given.tied_embeddings), keep(o_type, c.weight_type, given.weight_type);
    keep(o_seed, c.seed, given.seed), keep(o_head_dim, c.head_dim, given.head_dim);
    keep(o_rope_dims, c.rope_dims, given.rope_dims);
    keep(o_original, c.rope_original_ctx, given.rope_original_ctx), keep(o_name, c.name, given.name);
    keep(o_vocab_from, c.vocab_from, given.vocab_from);
    keep(o_window, c.sliding_window, given.sliding_window), keep(o_pattern, c.swa_pattern, given.swa_pattern);
    keep(o_experts, c.n_expert, given.n_expert), keep(o_used, c.n_expert_used, given.n_expert_used);
    keep(o_expert_ffn, c.n_ff_exp, given.n_ff_exp);
  }
  try {
    validate(c);  // before the head size is printed
    const auto t0 = std::chrono::steady_clock::now();
    const std::string vocab = c.vocab_from.empty() ? std::to_string(c.n_vocab) : "of " + c.vocab_from;
    std::fprintf(stderr, "fafo-synth: %s, %d layers, dim %d, heads %d/%d of %d, ffn %d, vocab %s, %s -> %s\n",
                 c.arch.c_str(), c.n_layer, c.n_embd, c.n_head, c.n_head_kv, head_dim_of(c), c.n_ff, vocab.c_str(),
                 c.weight_type.c_str(), out.c_str());
    const uint64_t bytes = write_synthetic_model(c, out, [](size_t done, size_t total) {
      std::fprintf(stderr, "\rfafo-synth: tensor %zu/%zu", done, total);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "\nfafo-synth: wrote %.1f MiB of weights in %.1f s\n", static_cast<double>(bytes) / (1 << 20), s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nfafo-synth: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
