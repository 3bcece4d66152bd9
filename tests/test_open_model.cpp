// fafo::open_model, the one way `fafo`, fafo-studio and the tests open a model, and
// fafo::resolve_chat_template, the one rule for which chat template a conversation
// uses: errors name the file or backend, the options reach the model, and a model
// without a usable template gets the built-in format it looks like, else chatml.
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>

#include "fafo/open_model.h"
#include "chat_template_copy.h"
#include "synthetic_model.h"
#include "test_support.h"

using namespace fafo;

namespace {


// A GGUF file with metadata only, enough for resolve_chat_template; `source` empty:
// no tokenizer.chat_template at all.
std::unique_ptr<GgufFile> metadata_file(const std::string& name, const std::string& source) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  if (!source.empty()) w.set_string("tokenizer.chat_template", source);
  const std::string path = (test::temp_dir("open-meta-" + name) / "m.gguf").string();
  w.write(path);
  return GgufFile::open(path);
}

// A small synthetic model (CPU-sized), optionally with a chat template of its own.
std::string synthetic_model(const std::string& name, const std::string& chat_template = "") {
  const std::string plain = (test::temp_dir("open-model-" + name) / "plain.gguf").string();
  synth::SyntheticConfig c;
  c.n_layer = 1, c.n_embd = 32, c.n_head = 2, c.n_head_kv = 2, c.n_ff = 48, c.n_vocab = 300, c.n_ctx = 256;
  synth::write_synthetic_model(c, plain);
  return chat_template.empty() ? plain : test::with_chat_template(plain, chat_template, "open-model-" + name).string();
}

OpenOptions on_cpu(const std::string& path) {
  OpenOptions o;
  o.path = path;
  o.backend = BackendSpec{"cpu", "", 2};
  return o;
}

std::string open_error(const OpenOptions& o) {
  try {
    open_model(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "opened but should not have: " << o.path;
  return "";
}

// Jinja that parses as far as the filter the interpreter lacks (wordwrap, line 3).
const char* const kChatmlLikeUnsupported =
    "{% for m in messages %}\n<|im_start|>{{ m.role }}\n{{ m.content | wordwrap(40) }}<|im_end|>\n{% endfor %}";

}  // namespace

TEST(OpenModel, AMissingFileIsNamed) {
  EXPECT_EQ(open_error(on_cpu("/nonexistent/model.gguf")), "/nonexistent/model.gguf: no such file");
  EXPECT_EQ(open_error(on_cpu("")), "no model file chosen");
  const std::string dir = test::temp_dir("open-dir").string();
  EXPECT_EQ(open_error(on_cpu(dir)), dir + ": not a file");
  const std::string junk = (test::temp_dir("open-junk") / "junk.gguf").string();
  std::ofstream(junk) << "not a gguf file";
  EXPECT_HAS(open_error(on_cpu(junk)), junk);
}

TEST(OpenModel, AnUnknownBackendIsNamed) {
  OpenOptions o = on_cpu(synthetic_model("backend"));
  o.backend.name = "nosuch";
  EXPECT_HAS(open_error(o), "unknown backend 'nosuch'");
}

TEST(OpenModel, TheOptionsReachTheModelAndTheTemplate) {
  OpenOptions o = on_cpu(synthetic_model("options"));
  o.n_ctx = 64;
  o.kv_type = KvCacheType::F16;
  o.chat_template = "llama2";
  const OpenedModel m = open_model(o);
  EXPECT_EQ(m.file->path(), o.path);
  EXPECT_EQ(m.model->n_ctx(), 64);
  EXPECT_EQ(m.model->backend().name(), "cpu");
  EXPECT_EQ(m.tokenizer->vocab().size(), m.model->config().n_vocab);
  EXPECT_EQ(m.chat.chat_template.name(), "llama2");
  EXPECT_TRUE(m.chat.note.empty()) << m.chat.note;
}

TEST(OpenModel, AnUnknownTemplateNameIsRefused) {
  OpenOptions o = on_cpu(synthetic_model("bad-template"));
  o.chat_template = "nosuch";
  try {
    open_model(o);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_HAS(std::string(e.what()), "'nosuch'");
    EXPECT_HAS(std::string(e.what()), builtin_chat_template_list());
  }
}

TEST(OpenModel, TheModelsOwnTemplateOrItsStandIn) {
  {
    const OpenedModel m = open_model(on_cpu(synthetic_model("none")));
    EXPECT_EQ(m.chat.chat_template.name(), "chatml");
    EXPECT_HAS(m.chat.note, "no chat template");
  }
  {
    const OpenedModel m = open_model(on_cpu(synthetic_model("own", "{% for m in messages %}[{{ m.content }}]{% endfor %}")));
    EXPECT_EQ(m.chat.chat_template.name(), "gguf");
    EXPECT_TRUE(m.chat.note.empty()) << m.chat.note;
  }
  {
    const OpenedModel m = open_model(on_cpu(synthetic_model("unusable", kChatmlLikeUnsupported)));
    EXPECT_EQ(m.chat.chat_template.name(), "chatml");
    EXPECT_HAS(m.chat.note, "the filter 'wordwrap'");
  }
}

TEST(ResolveChatTemplate, BuiltInNamesAndFiles) {
  const auto file = metadata_file("names", "");
  for (const std::string& name : builtin_chat_template_names()) {
    const ResolvedChatTemplate r = resolve_chat_template(*file, name);
    EXPECT_EQ(r.chat_template.name(), name);
    EXPECT_TRUE(r.note.empty()) << r.note;
  }
  const auto dir = test::temp_dir("resolve-files");
  const std::string good = (dir / "good.jinja").string();
  std::ofstream(good) << "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
  const ResolvedChatTemplate r = resolve_chat_template(*file, good);
  EXPECT_EQ(r.chat_template.name(), good);
  EXPECT_EQ(r.chat_template.render({{"user", "hi"}}, false), "<user>hi");
  const std::string bad = (dir / "bad.jinja").string();
  std::ofstream(bad) << "{{ bos_token }}\n{% include 'header.jinja' %}";
  EXPECT_THROW(resolve_chat_template(*file, bad), ChatTemplateError);
  EXPECT_THROW(resolve_chat_template(*file, "nosuch"), std::invalid_argument);
  EXPECT_THROW(resolve_chat_template(*file, (dir / "missing.jinja").string()), std::invalid_argument);
}

TEST(ResolveChatTemplate, AModelWithoutATemplateGetsChatml) {
  const ResolvedChatTemplate r = resolve_chat_template(*metadata_file("none", ""), "");
  EXPECT_EQ(r.chat_template.name(), "chatml");
  EXPECT_EQ(r.note, "the model has no chat template (tokenizer.chat_template): using chatml");
  // A non-string value is no template either.
  GgufWriter w;
  w.set_i32("tokenizer.chat_template", 7);
  const std::string path = (test::temp_dir("resolve-int") / "m.gguf").string();
  w.write(path);
  EXPECT_EQ(resolve_chat_template(*GgufFile::open(path), "").chat_template.name(), "chatml");
}

TEST(ResolveChatTemplate, AnUnusableTemplateGetsTheFormatItLooksLike) {
  const ResolvedChatTemplate chatml = resolve_chat_template(*metadata_file("chatml-like", kChatmlLikeUnsupported), "");
  EXPECT_EQ(chatml.chat_template.name(), "chatml");
  EXPECT_HAS(chatml.note, "cannot be used");
  EXPECT_HAS(chatml.note, "line 3");
  EXPECT_HAS(chatml.note, "the filter 'wordwrap'");
  EXPECT_HAS(chatml.note, "using chatml, the built-in format it looks like");

  const ResolvedChatTemplate llama3 = resolve_chat_template(
      *metadata_file("llama3-like",
                     "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
                     "{{ m.content | wordwrap(40) }}<|eot_id|>{% endfor %}"),
      "");
  EXPECT_EQ(llama3.chat_template.name(), "llama3");
  EXPECT_HAS(llama3.note, "using llama3, the built-in format it looks like");

  const ResolvedChatTemplate unknown =
      resolve_chat_template(*metadata_file("unknown-like", "{{ messages | wordwrap(40) }}"), "");
  EXPECT_EQ(unknown.chat_template.name(), "chatml");
  EXPECT_HAS(unknown.note, "using chatml");
  EXPECT_EQ(unknown.note.find("looks like"), std::string::npos) << unknown.note;
}

TEST(ResolveChatTemplate, AChoiceOverridesTheModelsTemplate) {
  const auto file = metadata_file("override", kChatmlLikeUnsupported);
  const ResolvedChatTemplate r = resolve_chat_template(*file, "gemma");
  EXPECT_EQ(r.chat_template.name(), "gemma");
  EXPECT_TRUE(r.note.empty()) << r.note;
}
