// Corpus drafting: candidates from a corpus index (--strategy corpus, and lookahead,
// fafo and auto with --corpus) keep the output token-identical to plain decoding, greedy
// and sampled; they are accepted where the corpus holds the text; StepTrace and the
// per-source yields say where accepted tokens came from.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "fafo/corpus_index.h"
#include "fafo/corpus_index_build.h"
#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "test_support.h"

namespace {

using namespace fafo;

const char* const kPrompts[] = {"Once upon a time", "Lily and Tom went to the park.", "The little dog"};

// An index over the model's own greedy continuations of the prompts (and some noise),
// so that its continuations are what the model predicts.
std::shared_ptr<const CorpusIndex> own_text_index(test::TestModel& m) {
  std::vector<int32_t> corpus;
  for (const char* p : kPrompts) {
    GenerationOptions o;
    o.n_predict = 120;
    o.sampling.temperature = 0;
    o.stop_at_end_of_generation = false;
    const auto prompt = m.tokenizer->encode(p, true);
    const auto r = generate(*m.model, *m.tokenizer, prompt, o);
    corpus.insert(corpus.end(), prompt.begin() + 1, prompt.end());
    corpus.insert(corpus.end(), r.ids.begin(), r.ids.end());
    corpus.push_back(m.tokenizer->vocab().eos);
  }
  for (int i = 0; i < 200; ++i) corpus.push_back((i * 37) % m.model->config().n_vocab);
  const auto path = test::temp_dir("corpus-decoding") / "own.fidx";
  write_corpus_index(path.string(), corpus, m.model->config().n_vocab, tokenizer_id(m.tokenizer->vocab()), 3);
  return CorpusIndex::open(path.string());
}

GenerationResult run(test::TestModel& m, const char* prompt, Strategy s, const std::shared_ptr<const CorpusIndex>& corpus,
                     float temperature, uint64_t seed, std::vector<StepTrace>* traces = nullptr) {
  GenerationOptions o;
  o.n_predict = 60;
  o.stop_at_end_of_generation = false;
  o.sampling = SamplerOptions{temperature, 0, 1.0f, 0.0f, seed};
  o.decoding.strategy = s;
  o.resources.corpus = corpus;
  o.decoding.corpus_path = corpus ? corpus->path() : "";
  o.decoding.guesses = 4;
  if (s == Strategy::Auto) {
    o.auto_options.rotate = true;  // every candidate, corpus ones included, in turn
    o.step_costs.sizes = {1};
    o.step_costs.seconds = {1.0};
  }
  if (traces) o.on_step = [traces](const StepTrace& t) { traces->push_back(t); };
  return generate(*m.model, *m.tokenizer, m.tokenizer->encode(prompt, true), o);
}

TEST(CorpusDecoding, EveryStrategyWithACorpusEqualsPlainDecoding) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 256);
  const auto corpus = own_text_index(m);
  int64_t sampled_from_corpus = 0;
  for (const char* prompt : kPrompts) {
    for (float temperature : {0.0f, 0.8f}) {
      for (uint64_t seed : {1u, 2u}) {
        if (temperature == 0.0f && seed == 2u) continue;
        const auto plain = run(m, prompt, Strategy::Ar, nullptr, temperature, seed);
        for (Strategy s : {Strategy::Corpus, Strategy::Lookahead, Strategy::Fafo, Strategy::Auto}) {
          const auto r = run(m, prompt, s, corpus, temperature, seed);
          EXPECT_EQ(r.ids, plain.ids) << strategy_name(s) << " '" << prompt << "' temperature " << temperature;
          if (s == Strategy::Corpus && temperature == 0.0f) {
            EXPECT_GT(r.tokens_per_step(), 2.0) << "the corpus holds this very text: most guesses must be accepted";
          }
          if (s == Strategy::Corpus && temperature > 0.0f)
            for (const SourceYield& y : r.source_yields) sampled_from_corpus += y.accepted;
        }
      }
    }
  }
  EXPECT_GT(sampled_from_corpus, 20) << "sampled runs accepted too few corpus guesses for the test to mean anything";
}

// On the oracle: corpus drafting and auto (every candidate in turn) keep plain decoding's
// greedy text.
TEST(CorpusDecoding, EqualsPlainDecodingOnTheReferenceBackend) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 256, 1, "reference");
  const auto corpus = own_text_index(m);
  for (const char* prompt : kPrompts) {
    const auto plain = run(m, prompt, Strategy::Ar, nullptr, 0.0f, 1);
    for (Strategy s : {Strategy::Corpus, Strategy::Auto})
      EXPECT_EQ(run(m, prompt, s, corpus, 0.0f, 1).ids, plain.ids) << strategy_name(s) << " '" << prompt << "'";
  }
}

TEST(CorpusDecoding, TracesAndYieldsSayTheCorpusSuppliedTheTokens) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 256);
  const auto corpus = own_text_index(m);
  std::vector<StepTrace> traces;
  const auto r = run(m, kPrompts[0], Strategy::Corpus, corpus, 0.0f, 1, &traces);
  int64_t corpus_accepted = 0;
  for (const SourceYield& y : r.source_yields) {
    EXPECT_EQ(y.source, "corpus");
    EXPECT_GE(y.key_length, 1);
    EXPECT_LE(y.key_length, 16);
    corpus_accepted += y.accepted;
  }
  EXPECT_GE(corpus_accepted, static_cast<int64_t>(r.ids.size()) - r.n_steps);
  EXPECT_LE(corpus_accepted, static_cast<int64_t>(r.ids.size()) - r.n_steps + 1);  // the last step may end on a guess
  int candidate_tokens = 0;
  for (const StepTrace& t : traces) {
    EXPECT_TRUE(t.window_before.empty());  // no 2D window
    for (const CandidateTrace& c : t.candidates) EXPECT_EQ(c.source, CandidateSource::Corpus);
    for (const TokenSource& s : t.accepted_sources)
      if (s.kind == TokenSource::Candidate) {
        EXPECT_EQ(s.source, CandidateSource::Corpus);
        ++candidate_tokens;
      }
    // The source survives the JSON round trip of --trace and the studio's replay.
    const StepTrace back = step_trace_from_json(step_trace_to_json(t));
    for (size_t k = 0; k < t.candidates.size(); ++k) EXPECT_EQ(back.candidates[k].source, t.candidates[k].source);
  }
  EXPECT_EQ(candidate_tokens, corpus_accepted);
  // Lookahead with the corpus: both the pool's and the corpus's candidates.
  const auto la = run(m, kPrompts[1], Strategy::Lookahead, corpus, 0.0f, 1);
  bool from_corpus = false;
  for (const SourceYield& y : la.source_yields) from_corpus |= y.source == "corpus" && y.accepted > 0;
  EXPECT_TRUE(from_corpus);
}

// open_corpus keeps the index it is given when it is the file asked for (opening checks
// every entry), opens the file otherwise, and gives none for no file.
TEST(CorpusDecoding, OpeningKeepsTheIndexOfTheSameFile) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 256);
  const std::shared_ptr<const CorpusIndex> built = own_text_index(m);
  const std::shared_ptr<const CorpusIndex> kept = open_corpus(built->path(), m.tokenizer->vocab(), built);
  EXPECT_EQ(kept, built);
  const std::shared_ptr<const CorpusIndex> fresh = open_corpus(built->path(), m.tokenizer->vocab());
  ASSERT_TRUE(fresh);
  EXPECT_NE(fresh, built);
  EXPECT_EQ(fresh->path(), built->path());
  EXPECT_FALSE(open_corpus("", m.tokenizer->vocab(), built));
}

TEST(CorpusDecoding, StrategyCorpusNeedsAnIndexOfTheSameVocabulary) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 256);
  GenerationOptions o;
  o.decoding.strategy = Strategy::Corpus;
  const auto prompt = m.tokenizer->encode("Once", true);
  EXPECT_THROW(generate(*m.model, *m.tokenizer, prompt, o), std::invalid_argument);
  const auto path = test::temp_dir("corpus-vocab") / "v.fidx";
  write_corpus_index(path.string(), std::vector<int32_t>{1, 2, 3}, 1000, {1, "other"}, 1);
  o.resources.corpus = CorpusIndex::open(path.string());
  try {
    generate(*m.model, *m.tokenizer, prompt, o);
    ADD_FAILURE() << "an index of another vocabulary size was used";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("1000"), std::string::npos) << e.what();
  }
  // Opening it checks the tokenizer itself.
  EXPECT_THROW(open_corpus(path.string(), m.tokenizer->vocab()), IndexError);
}

}  // namespace
