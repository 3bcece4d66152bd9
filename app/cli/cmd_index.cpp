// `fafo index build|info|bench`: corpus indexes for corpus drafting (fafo/corpus_index.h).
//
//   fafo index build -m MODEL --corpus FILE... -o NAME.fidx   tokenize and index text files
//   fafo index info NAME.fidx [-m MODEL]                      what an index holds (and whether it suits MODEL)
//   fafo index bench [NAME.fidx | --synthetic N]              lookup latency percentiles; with
//                                                             --synthetic, build throughput too
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "input_files.h"
#include "plural.h"
#include "fafo/corpus_index.h"
#include "fafo/corpus_index_build.h"
#include "fafo/gguf.h"
#include "fafo/tokenizer.h"

namespace fafo::cli {

namespace {

struct IndexArgs {
  std::string model;
  std::vector<std::string> corpus;
  std::string output;
  std::string index;
  int threads = 0;
  uint64_t synthetic = 0;
  int32_t vocab = 32000;
  int32_t lookups = 10000;
  int32_t max_suffix = 16;
  int32_t continuation = 4;
  int32_t candidates = 8;
  bool json = false;
};

double per_minute(uint64_t tokens, double seconds) { return seconds > 0 ? static_cast<double>(tokens) / seconds * 60.0 : 0.0; }

void print_info(const CorpusIndex& ix) {
  std::printf("index:        %s\n", ix.path().c_str());
  std::printf("tokens:       %llu in %s\n", static_cast<unsigned long long>(ix.size()),
              app::count_of(static_cast<int64_t>(ix.documents()), "document").c_str());
  std::printf("tokenizer:    %s (%d tokens, fingerprint %016llx)\n", ix.tokenizer().name.c_str(), ix.n_vocab(),
              static_cast<unsigned long long>(ix.tokenizer().fingerprint));
  std::printf("layout:       %d bytes per token, %d per suffix-array entry\n", ix.token_bytes(), ix.suffix_bytes());
  std::printf("file:         %llu bytes (%.2f bytes per token; %.2f beyond the tokens)\n",
              static_cast<unsigned long long>(ix.file_bytes()), static_cast<double>(ix.file_bytes()) / static_cast<double>(ix.size()),
              static_cast<double>(ix.file_bytes()) / static_cast<double>(ix.size()) - ix.token_bytes());
}

int run_build(const IndexArgs& a) {
  app::require_readable_file(a.model);
  for (const std::string& path : a.corpus) app::require_readable_file(path);
  const std::shared_ptr<const GgufFile> file = GgufFile::open(a.model);
  const Tokenizer tok(Vocab::from_gguf(*file));
  IndexBuildOptions o;
  o.corpus_files = a.corpus;
  o.output = a.output;
  o.threads = a.threads;
  const IndexBuildStats s = build_corpus_index(tok, o);  // its stages' progress: main's terminal sink
  const double total = s.tokenize_seconds + s.sort_seconds + s.write_seconds;
  std::fprintf(stderr,
               "fafo: %s: %llu tokens from %.1f MB in %s; tokenize %.2f s, sort %.2f s, write %.2f s "
               "(%.2f M tokens per minute)\n",
               a.output.c_str(), static_cast<unsigned long long>(s.tokens), static_cast<double>(s.text_bytes) / 1e6,
               app::count_of(static_cast<int64_t>(s.documents), "file").c_str(), s.tokenize_seconds, s.sort_seconds, s.write_seconds,
               per_minute(s.tokens, total) / 1e6);
  print_info(*CorpusIndex::open(a.output));
  return 0;
}

int run_info(const IndexArgs& a) {
  app::require_readable_file(a.index);
  if (!a.model.empty()) app::require_readable_file(a.model);
  const auto ix = CorpusIndex::open(a.index);
  print_info(*ix);
  if (!a.model.empty()) {
    const std::shared_ptr<const GgufFile> file = GgufFile::open(a.model);
    ix->check_tokenizer(Vocab::from_gguf(*file));
    std::printf("model:        %s uses this tokenizer\n", a.model.c_str());
  }
  return 0;
}

// Text with repetition, as corpora have: phrases drawn from a Zipf-like phrase book,
// words from a Zipf-like vocabulary.
std::vector<int32_t> synthetic_tokens(uint64_t n, int32_t vocab) {
  std::mt19937_64 rng(1);
  std::vector<std::vector<int32_t>> phrases(20000);
  auto zipf = [&](uint64_t range) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    return static_cast<uint64_t>(std::pow(static_cast<double>(range), u)) - 1;  // log-uniform: heavy head
  };
  for (auto& p : phrases) {
    p.resize(2 + rng() % 10);
    for (int32_t& t : p) t = static_cast<int32_t>(zipf(static_cast<uint64_t>(vocab)));
  }
  std::vector<int32_t> out;
  out.reserve(n);
  while (out.size() < n) {
    if (rng() % 3) {
      const auto& p = phrases[zipf(phrases.size())];
      for (int32_t t : p)
        if (out.size() < n) out.push_back(t);
    } else {
      out.push_back(static_cast<int32_t>(zipf(static_cast<uint64_t>(vocab))));
    }
  }
  return out;
}

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

Percentiles percentiles(std::vector<double> us) {
  if (us.empty()) return {};
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))]; };
  return {at(0.5), at(0.9), at(0.99), us.back()};
}

int run_bench(const IndexArgs& a) {
  nlohmann::json j;
  std::string path = a.index;
  // A synthetic index written to a temporary file is removed however this returns.
  struct Removal {
    std::filesystem::path file;
    ~Removal() {
      std::error_code ec;
      if (!file.empty()) std::filesystem::remove(file, ec);
    }
  } removal;
  std::filesystem::path temp;
  if (a.synthetic > 0) {
    if (!a.index.empty()) throw std::runtime_error("give an index or --synthetic, not both");
    if (a.vocab < 2) throw std::runtime_error("--vocab must be at least 2");
    temp = a.output.empty() ? std::filesystem::temp_directory_path() / ("fafo-index-bench-" + std::to_string(::getpid()) + ".fidx")
                            : std::filesystem::path(a.output);
    path = temp.string();
    if (a.output.empty()) removal.file = temp;
    std::fprintf(stderr, "fafo: writing %llu synthetic tokens (vocabulary %d)...\n", static_cast<unsigned long long>(a.synthetic), a.vocab);
    const std::vector<int32_t> tokens = synthetic_tokens(a.synthetic, a.vocab);
    IndexBuildStats s;
    write_corpus_index(path, tokens, a.vocab, {0x5e7, "synthetic"}, 1, IndexWriteOptions{}, &s);
    std::printf("build: %llu tokens: sort %.2f s, write %.2f s: %.2f M tokens per minute (tokenizing not included)\n",
                static_cast<unsigned long long>(s.tokens), s.sort_seconds, s.write_seconds,
                per_minute(s.tokens, s.sort_seconds + s.write_seconds) / 1e6);
    j["build"] = {{"tokens", s.tokens}, {"sort_s", s.sort_seconds}, {"write_s", s.write_seconds}, {"file_bytes", s.file_bytes}};
  } else if (a.index.empty()) {
    throw std::runtime_error("give an index file, or --synthetic N to bench one it writes");
  } else {
    app::require_readable_file(path);
  }
  const auto ix = CorpusIndex::open(path);
  print_info(*ix);
  // Contexts: half are the tokens before a random corpus position (they match up to
  // --max-suffix tokens), half end with a token drawn at random from the corpus after
  // such a context (they match briefly, as generated text mostly does).
  std::mt19937_64 rng(2);
  const size_t ctx = static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(std::max(a.max_suffix, 1)), ix->size()));
  std::vector<double> found_us, shifted_us;
  std::vector<int32_t> lengths;
  uint64_t continuations = 0;
  for (int32_t i = 0; i < a.lookups; ++i) {
    std::vector<int32_t> context;
    const uint64_t end = ctx + rng() % std::max<uint64_t>(ix->size() - ctx, 1);
    for (uint64_t p = end - std::min<uint64_t>(ctx, end); p < end && p < ix->size(); ++p) context.push_back(ix->token(p));
    const bool shifted = i % 2 == 1;
    if (shifted && !context.empty()) context.back() = ix->token(rng() % ix->size());
    const auto t0 = std::chrono::steady_clock::now();
    const CorpusMatch m = ix->longest_suffix(context, a.max_suffix);
    const auto c = ix->continuations(m, a.continuation, a.candidates);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    (shifted ? shifted_us : found_us).push_back(us);
    lengths.push_back(m.length);
    continuations += c.size();
  }
  std::vector<double> all = found_us;
  all.insert(all.end(), shifted_us.begin(), shifted_us.end());
  const Percentiles p = percentiles(all), pf = percentiles(found_us), ps = percentiles(shifted_us);
  double mean_length = 0;
  for (int32_t l : lengths) mean_length += l;
  mean_length /= std::max<size_t>(lengths.size(), 1);
  std::printf("lookups: %d (longest suffix up to %d tokens, then the %d most frequent %d-token continuations)\n", a.lookups,
              a.max_suffix, a.candidates, a.continuation);
  std::printf("| contexts | p50 us | p90 us | p99 us | max us |\n|---|--:|--:|--:|--:|\n");
  std::printf("| all | %.1f | %.1f | %.1f | %.1f |\n", p.p50, p.p90, p.p99, p.max);
  std::printf("| from the corpus | %.1f | %.1f | %.1f | %.1f |\n", pf.p50, pf.p90, pf.p99, pf.max);
  std::printf("| last token changed | %.1f | %.1f | %.1f | %.1f |\n", ps.p50, ps.p90, ps.p99, ps.max);
  std::printf("mean match length %.2f tokens, %.2f continuations per lookup\n", mean_length,
              static_cast<double>(continuations) / std::max(a.lookups, 1));
  j["lookups"] = {{"count", a.lookups}, {"p50_us", p.p50}, {"p90_us", p.p90}, {"p99_us", p.p99}, {"max_us", p.max},
                  {"mean_match_length", mean_length}};
  j["index"] = {{"tokens", ix->size()}, {"file_bytes", ix->file_bytes()}};
  if (a.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

Command add_index_command(CLI::App& app) {
  auto a = std::make_shared<IndexArgs>();
  CLI::App* cmd = app.add_subcommand("index", "Corpus indexes for corpus drafting (--corpus): build, info, bench");
  cmd->require_subcommand(1);
  CLI::App* build = cmd->add_subcommand("build", "Tokenize text files with a model's tokenizer and index them (suffix array)");
  build->add_option("-m,--model", a->model, "GGUF file whose tokenizer to use (only the vocabulary is read)")->required();
  build->add_option("--corpus", a->corpus, "Text files; each is one document, ended with the end-of-text token")
      ->required()->expected(1, -1);
  build->add_option("-o,--output", a->output, "The index file to write (NAME.fidx)")->required();
  build->add_option("-t,--threads", a->threads, "Tokenizing threads (0 = every hardware thread)")->capture_default_str()
      ->check(CLI::Range(0, 1024));
  CLI::App* info = cmd->add_subcommand("info", "What an index holds; with -m, whether it was built with that model's tokenizer");
  info->add_option("index", a->index, "The index file")->required();
  info->add_option("-m,--model", a->model, "Check the index against this GGUF file's tokenizer");
  CLI::App* bench = cmd->add_subcommand("bench", "Lookup latency percentiles (and build throughput with --synthetic)");
  bench->add_option("index", a->index, "The index file");
  bench->add_option("--synthetic", a->synthetic, "Instead: write an index of this many synthetic tokens and time its build")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 36));
  bench->add_option("--vocab", a->vocab, "--synthetic: vocabulary size")->capture_default_str()->check(CLI::Range(2, 1 << 30));
  bench->add_option("-o,--output", a->output, "--synthetic: keep the index in this file (else a temporary, removed)");
  bench->add_option("--lookups", a->lookups, "Lookups to time")->capture_default_str()->check(CLI::Range(1, 100000000));
  bench->add_option("--max-suffix", a->max_suffix, "Longest context suffix looked up")->capture_default_str()->check(CLI::Range(1, 1024));
  bench->add_option("--continuation", a->continuation, "Tokens per continuation")->capture_default_str()->check(CLI::Range(1, 64));
  bench->add_option("--candidates", a->candidates, "Continuations per lookup")->capture_default_str()->check(CLI::Range(1, 1024));
  bench->add_flag("--json", a->json, "Also print the results as JSON");
  return [a, build, info, bench] {
    if (build->parsed()) return run_build(*a);
    if (info->parsed()) return run_info(*a);
    if (bench->parsed()) return run_bench(*a);
    return 1;
  };
}

}  // namespace fafo::cli
