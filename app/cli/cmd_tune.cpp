// `fafo tune -m FILE`: measures, on a Vulkan device, the rows per workgroup of every
// product the model runs (steps of 1 to 64 tokens, every row wanting logits), keeps the
// choices in the cache folder (where every later run on that device, driver and build
// finds them, beside other models' shapes) and prints them. Without it, a GPU measures
// each new shape by itself at the end of the step that first runs it (FAFO_VULKAN_TUNE;
// docs/vulkan.md). --keep measures only the shapes the kept choices lack.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "commands.h"
#include "default_model.h"
#include "model_flags.h"
#include "fafo/open_model.h"
#include "fafo/vulkan_tuning.h"

namespace fafo::cli {

namespace {

struct TuneArgs {
  OpenOptions open;
  bool keep = false;
  std::vector<int32_t> sizes = {1, 2, 4, 8, 16, 32, 64};
};

int run_tune(TuneArgs& a) {
#if FAFO_HAVE_VULKAN
  if (!a.open.split.empty()) {
    std::fprintf(stderr, "fafo tune: it tunes one Vulkan device (--backend vulkan --device D); it takes no --split\n");
    return 2;
  }
  if (a.open.backend.name == "auto") a.open.backend.name = "vulkan";
  if (a.open.backend.name != "vulkan") {
    std::fprintf(stderr, "fafo tune: --backend %s has nothing to tune; it tunes the Vulkan backend (--backend vulkan)\n",
                 a.open.backend.name.c_str());
    return 2;
  }
  // The backend reads this when it is created: measure every shape (again, or only the
  // ones not kept with --keep).
  ::setenv("FAFO_VULKAN_TUNE", a.keep ? "1" : "again", 1);
  const int32_t largest = *std::max_element(a.sizes.begin(), a.sizes.end());
  if (a.open.n_ctx != 0 && a.open.n_ctx < largest) a.open.n_ctx = largest;  // 0: the model's
  OpenedModel m = open_model(a.open);
  if (!m.placement_note.empty()) std::fprintf(stderr, "fafo tune: %s\n", m.placement_note.c_str());
  Sequence& model = *m.model;
  std::printf("tuning %s on %s\n", a.open.path.c_str(), model.backend().description().c_str());
  std::fflush(stdout);
  // Every step size runs once, so that every product shape it uses is noted and measured
  // at the end of its step (tune_now below measures anything left).
  for (const int32_t T : a.sizes) {
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    std::iota(tokens.begin(), tokens.end(), 1);
    model.truncate(0);
    StepBatch b = StepBatch::causal(tokens, 0, /*logits_for_all=*/true);  // the output head at every size
    (void)model.forward(b);
  }
  const std::vector<std::string> lines = vulkan_tune_now(model.backend());
  for (const std::string& line : lines) std::printf("  %s\n", line.c_str());
  const std::string file = vulkan_tuning_file(model.backend());
  std::printf("%zu shape%s; %s\n", lines.size(), lines.size() == 1 ? "" : "s",
              file.empty() ? "not kept (no cache folder)" : ("kept in " + file).c_str());
  return 0;
#else
  (void)a;
  std::fprintf(stderr, "fafo tune: this build has no Vulkan backend (FAFO_VULKAN=OFF or not found)\n");
  return 2;
#endif
}

}  // namespace

Command add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Measure the Vulkan products' rows per workgroup for a model on a device (steps of 1 to 64 tokens) and keep "
      "the fastest in the cache folder ($FAFO_CACHE_DIR, else ~/.cache/fafo); GPUs otherwise measure each new "
      "shape at its first use");
  app::add_open_flags(cmd, a->open);
  cmd->add_flag("--keep", a->keep, "Keep the choices already made; measure only the shapes without one");
  cmd->add_option("--sizes", a->sizes, "Step sizes (tokens) whose products to measure, e.g. 1,8 (default 1 to 64)")
      ->delimiter(',')
      ->check(CLI::Range(1, 512));
  return [a] {
    app::use_default_model_if_unset(a->open.path);
    return run_tune(*a);
  };
}

}  // namespace fafo::cli
