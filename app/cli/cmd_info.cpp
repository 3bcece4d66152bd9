// `fafo info -m FILE`: what a GGUF file holds: format, architecture and
// hyperparameters, tokenizer summary, tensor table, parameter count and size.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "commands.h"
#include "default_model.h"
#include "input_files.h"
#include "fafo/gguf.h"
#include "fafo/model_config.h"
#include "fafo/step_runner.h"
#include "fafo/tokenizer.h"

namespace fafo::cli {

namespace {

struct InfoArgs {
  std::string model;
  bool all_metadata = false;
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int run_info(const InfoArgs& args) {
  auto file = GgufFile::open(args.model);
  const GgufFile& f = *file;
  std::printf("file:          %s\n", f.path().c_str());
  std::printf("format:        GGUF v%u, %s, alignment %llu, %zu metadata keys, %zu tensors\n", f.version(),
              human_bytes(static_cast<double>(f.file_size())).c_str(), static_cast<unsigned long long>(f.alignment()),
              f.metadata().size(), f.tensors().size());

  std::printf("\n== model ==\n");
  try {
    const ModelConfig c = ModelConfig::from_gguf(f);
    std::printf("architecture:  %s%s\n", c.arch.c_str(), c.name.empty() ? "" : (" (" + c.name + ")").c_str());
    std::printf("layers:        %d\n", c.n_layer);
    std::printf("embedding:     %d\n", c.n_embd);
    std::printf("heads:         %d (KV heads %d, head size %d%s)\n", c.n_head, c.n_head_kv, c.head_dim,
                c.n_head_kv != c.n_head ? ", GQA" : "");
    if (c.moe())
      std::printf("feed-forward:  mixture of experts: %d experts of %d, %d used per token (%.1f%% of the expert weights)%s\n",
                  c.n_expert, c.n_ff_exp, c.n_expert_used, 100.0 * c.n_expert_used / c.n_expert,
                  c.moe_softmax_of_chosen ? "; the router's best logits weighted by their softmax, experts with biases "
                                            "and a clamped SwiGLU"
                                          : "");
    else
      std::printf("feed-forward:  %d\n", c.n_ff);
    std::printf("vocabulary:    %d\n", c.n_vocab);
    if (c.n_ctx_train_in_file)
      std::printf("context:       %d (trained)\n", c.n_ctx_train);
    else
      std::printf("context:       not in the file (context_length); %d assumed\n", c.n_ctx_train);
    std::printf("RMSNorm eps:   %g\n", static_cast<double>(c.rms_eps));
    std::printf("RoPE:          %s, %d dims, base %g, scaling %s%s\n", c.rope.neox ? "neox" : "normal", c.rope.n_dims,
                static_cast<double>(c.rope.freq_base), c.rope_scaling.c_str(),
                f.find_tensor("rope_freqs.weight") ? " (rope_freqs tensor)" : "");
    if (c.rope_scaling == "yarn")
      std::printf("YaRN:          factor %g from a trained context of %d; cos and sin scaled by %g\n",
                  static_cast<double>(c.rope_factor), c.rope_original_ctx, static_cast<double>(c.rope.attn_factor));
    if (!c.rope_factors_short.empty())
      std::printf("LongRoPE:      short factors for contexts of up to %d, long ones past it\n", c.rope_original_ctx);
    if (c.rope_attn_factor != 1.0f)
      std::printf("RoPE factor:   %g on the rotated queries and keys\n", static_cast<double>(c.rope_attn_factor));
    std::printf("output:        %s%s%s\n", c.tied_embeddings ? "tied to token_embd" : "separate output.weight",
                c.qkv_bias ? ", QKV bias" : "", c.attn_out_bias ? ", attention output bias" : "");
    if (c.attention_sinks) std::printf("attn sinks:    one per head, an extra logit in each row's softmax\n");
    if (c.qk_norm) std::printf("Q/K norms:     an RMSNorm of each query and key head before RoPE\n");
    if (c.gelu_ffn || c.post_norms)
      std::printf("blocks:        %s feed-forward%s\n", c.gelu_ffn ? "GeGLU" : "SwiGLU",
                  c.post_norms ? ", RMSNorms after attention and feed-forward too" : "");
    if (c.embedding_scale > 0.0f) std::printf("embeddings:    scaled by %g\n", static_cast<double>(c.embedding_scale));
    if (c.query_pre_attn_scalar > 0.0f)
      std::printf("attn scale:    1/sqrt(%g)\n", static_cast<double>(c.query_pre_attn_scalar));
    if (c.attn_softcap > 0.0f || c.final_softcap > 0.0f)
      std::printf("soft-capping:  attention scores at %g, logits at %g\n", static_cast<double>(c.attn_softcap),
                  static_cast<double>(c.final_softcap));
    if (c.sliding_window > 0) {
      int32_t local = 0;
      for (int32_t l = 0; l < c.n_layer; ++l) local += c.window_layer(l) ? 1 : 0;
      if (c.rope_scaling == "yarn")  // (gpt-oss: the window layers rotate as the others, YaRN included)
        std::printf("sliding window: %d tokens on %d of %d layers (RoPE as the others there)\n", c.sliding_window, local,
                    c.n_layer);
      else
        std::printf("sliding window: %d tokens on %d of %d layers (RoPE base %g, scale %g there)\n", c.sliding_window,
                    local, c.n_layer, static_cast<double>(c.rope_swa.freq_base), static_cast<double>(c.rope_swa.freq_scale));
    }
    const int64_t plain_floats = int64_t{2} * c.n_layer * c.kv_dim();
    if (c.mla()) {
      std::printf("attention:     multi-head latent (MLA, fafo-care %s), latent ranks K/V per layer:",
                  c.mla_method.empty() ? "?" : c.mla_method.c_str());
      for (size_t l = 0; l < c.mla_rank_k.size(); ++l) std::printf(" %d/%d", c.mla_rank_k[l], c.mla_rank_v[l]);
      std::printf("\n");
    }
    // (q8_0 and q4_0: where an entry is whole 32-value blocks; not for latent caches.)
    const bool blocks = !c.mla() && c.kv_dim() % 32 == 0;
    const double floats = static_cast<double>(c.kv_floats_per_token());
    const std::string block_sizes =
        blocks ? ", " + human_bytes(floats * 34.0 / 32.0) + " in q8_0, " + human_bytes(floats * 18.0 / 32.0) + " in q4_0" : "";
    std::printf("KV cache:      %s per token in f32 (%s in f16%s)%s\n", human_bytes(4.0 * floats).c_str(),
                human_bytes(2.0 * floats).c_str(), block_sizes.c_str(),
                c.mla() ? (", " + std::to_string(c.kv_floats_per_token() * 100 / plain_floats) + "% of the plain cache").c_str()
                        : "");
    // What a context the size of --ctx-size's default (the trained one, at most 4096) holds.
    const int32_t n_ctx = std::min(c.n_ctx_train > 0 ? c.n_ctx_train : 4096, 4096);
    const double at_ctx = static_cast<double>(c.kv_floats_per_token()) * n_ctx;
    std::printf("               %s in f32 (%s in f16) for a context of %d", human_bytes(4.0 * at_ctx).c_str(),
                human_bytes(2.0 * at_ctx).c_str(), n_ctx);
    if (c.sliding_window > 0 && c.sliding_window < n_ctx && !c.mla()) {
      int32_t local = 0;
      for (int32_t l = 0; l < c.n_layer; ++l) local += c.window_layer(l) ? 1 : 0;
      std::printf("; %s of it (f32) on the %d sliding-window layer%s, whose rows read only the last %d",
                  human_bytes(4.0 * 2.0 * c.kv_dim() * static_cast<double>(local) * n_ctx).c_str(), local,
                  local == 1 ? "" : "s", c.sliding_window);
      // The rings (KvCacheShape::ring): window + a step's tokens per window layer.
      const int32_t ring = c.sliding_window + StepRunner::kMaxStepTokens - 1;
      if (ring < n_ctx) {
        const double ring_floats = 2.0 * c.kv_dim() * static_cast<double>(local) * ring;
        const double global_floats = 2.0 * c.kv_dim() * static_cast<double>(c.n_layer - local) * n_ctx;
        std::printf("\n               with the window layers as rings of %d entries (the default; not "
                    "--swa-full): %s in f32 (%s in f16)",
                    ring, human_bytes(4.0 * (ring_floats + global_floats)).c_str(),
                    human_bytes(2.0 * (ring_floats + global_floats)).c_str());
      }
    }
    std::printf("\n");
  } catch (const std::exception& e) {
    std::printf("not loadable by fafo: %s\n", e.what());
  }

  std::printf("\n== tokenizer ==\n");
  try {
    const Vocab v = Vocab::from_gguf(f);
    std::printf("model:         %s%s\n", v.model.c_str(), v.pre.empty() ? "" : (" (pre: " + v.pre + ")").c_str());
    std::printf("tokens:        %d\n", v.size());
    auto tok = [&](int32_t id) { return id >= 0 && id < v.size() ? std::to_string(id) + " '" + v.tokens[static_cast<size_t>(id)] + "'" : std::string("none"); };
    std::printf("BOS / EOS:     %s / %s (add BOS: %s, add EOS: %s)\n", tok(v.bos).c_str(), tok(v.eos).c_str(),
                v.add_bos ? "yes" : "no", v.add_eos ? "yes" : "no");
    std::printf("chat template: %s\n", f.find("tokenizer.chat_template") ? "present" : "none");
  } catch (const std::exception& e) {
    std::printf("not loadable by fafo: %s\n", e.what());
  }

  std::printf("\n== metadata ==\n");
  for (const auto& [key, value] : f.metadata()) {
    if (!args.all_metadata && key.rfind("tokenizer.ggml.", 0) == 0 && value.type == GgufType::ARRAY) {
      std::printf("  %-44s %s\n", key.c_str(), value.summary(0).c_str());
      continue;
    }
    std::printf("  %-44s %s\n", key.c_str(), value.summary(args.all_metadata ? 1u << 20 : 8).c_str());
  }

  std::printf("\n== tensors ==\n");
  std::printf("  %-32s %-6s %-20s %12s\n", "name", "type", "shape", "bytes");
  uint64_t n_params = 0, n_bytes = 0;
  std::map<std::string, int> by_type;
  for (const GgufTensor& t : f.tensors()) {
    std::printf("  %-32s %-6s %-20s %12llu\n", t.name.c_str(), std::string(tensor_type_name(t.type)).c_str(),
                shape_text(t.shape).c_str(), static_cast<unsigned long long>(t.n_bytes));
    n_params += static_cast<uint64_t>(t.n_elements());
    n_bytes += t.n_bytes;
    ++by_type[std::string(tensor_type_name(t.type))];
  }
  std::string types;
  for (const auto& [name, count] : by_type) types += (types.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  std::printf("\nparameters:    %llu (%.3f M)\n", static_cast<unsigned long long>(n_params), static_cast<double>(n_params) / 1e6);
  std::printf("weights size:  %s (%.2f bits per weight)\n", human_bytes(static_cast<double>(n_bytes)).c_str(),
              n_params ? 8.0 * static_cast<double>(n_bytes) / static_cast<double>(n_params) : 0.0);
  std::printf("tensor types:  %s\n", types.c_str());
  return 0;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = app.add_subcommand("info", "Show a GGUF file's architecture, hyperparameters, tokenizer and tensors");
  cmd->add_option("-m,--model", args->model, "GGUF file (default: $FAFO_MODEL, else the shipped stories260K.gguf)");
  cmd->add_flag("--all-metadata", args->all_metadata, "Print long metadata arrays in full");
  return [args] {
    app::use_default_model_if_unset(args->model);
    app::require_readable_file(args->model);
    return run_info(*args);
  };
}

}  // namespace fafo::cli
