// Chat templates: every real template in ../shared/templates rendered exactly as
// the reference Jinja2 engine rendered it (golden/templates/renderings.json), and
// built-in formats (the interpreter's constructs and error messages: test_jinja.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat_template_context.h"
#include "fafo/chat_template.h"
#include "test_support.h"

namespace {

using fafo::ChatMessage;
using fafo::ChatTemplate;
using fafo::ChatTemplateContext;
using fafo::ChatTemplateError;
using fafo::test::context;

// ---- golden renderings of the real templates --------------------------------------

TEST(ChatTemplateGolden, EveryTemplateRendersEveryConversationExactly) {
  FAFO_REQUIRE_SHARED(renderings, "golden/templates/renderings.json");
  FAFO_REQUIRE_SHARED(templates, "templates");
  const nlohmann::json golden = nlohmann::json::parse(fafo::test::read_text(renderings));
  ASSERT_GE(golden["templates"].size(), 17u);
  int checked = 0, errors = 0;
  for (const auto& [name, entry] : golden["templates"].items()) {
    SCOPED_TRACE(name);
    const std::filesystem::path file = templates / (name + ".jinja");
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    std::optional<ChatTemplate> parsed;
    try {
      parsed = ChatTemplate::from_source(fafo::test::read_text(file), name);
    } catch (const ChatTemplateError& e) {
      ADD_FAILURE() << e.kind_name() << ": " << e.what();
      continue;
    }
    const ChatTemplate& tmpl = *parsed;
    const ChatTemplateContext ctx = context(entry["bos_token"], entry["eos_token"]);
    for (const auto& [key, expected] : entry["renderings"].items()) {
      SCOPED_TRACE(key);
      const std::string conversation = key.substr(0, key.find('.'));
      const bool add_generation_prompt = key.substr(key.find('.') + 1) == "gen1";
      nlohmann::ordered_json messages = nlohmann::ordered_json::parse(golden["conversations"][conversation].dump());
      if (expected["ok"].get<bool>()) {
        try {
          EXPECT_EQ(tmpl.render_json(messages, add_generation_prompt, ctx), expected["text"].get<std::string>());
        } catch (const ChatTemplateError& e) {
          ADD_FAILURE() << e.kind_name() << ": " << e.what();
        }
      } else {
        // The golden error is "ExceptionClass: message", e.g. "TemplateError: System role not supported".
        const std::string want = expected["error"];
        try {
          const std::string text = tmpl.render_json(messages, add_generation_prompt, ctx);
          ADD_FAILURE() << "expected the error '" << want << "', rendered:\n" << text;
        } catch (const ChatTemplateError& e) {
          EXPECT_EQ(std::string(e.kind_name()) + ": " + e.message(), want);
          ++errors;
        }
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(golden["templates"].size()) * 4);
  EXPECT_GT(errors, 0);
}

// Templates of the model families beyond the shared set (tests/data/templates/<name>.json,
// rendered by Jinja2 with tools/peer/render_template.py), with the extra variables a
// caller may pass (Qwen3's enable_thinking), exactly: Qwen3's (from ../shared) and
// gpt-oss's harmony format (the data holds the template: macros calling themselves,
// namespace() objects, slices, `is mapping` / `is iterable`, strftime_now).
TEST(ChatTemplateGolden, FamilyTemplatesRenderEveryConversationExactly) {
  for (const std::string name : {"qwen3", "gpt-oss"}) {
    SCOPED_TRACE(name);
    const nlohmann::json golden =
        nlohmann::json::parse(fafo::test::read_text(fafo::test::source_path("tests/data/templates/" + name + ".json")));
    std::string source;
    if (golden.contains("chat_template")) {
      source = golden["chat_template"].get<std::string>();
    } else {
      FAFO_REQUIRE_SHARED(config, golden["template_from"].get<std::string>());
      source = nlohmann::json::parse(fafo::test::read_text(config))["chat_template"].get<std::string>();
    }
    const ChatTemplate tmpl = ChatTemplate::from_source(source, name);
    ChatTemplateContext ctx = context(golden["bos_token"], golden["eos_token"]);
    int checked = 0;
    for (const auto& [key, expected] : golden["renderings"].items()) {
      SCOPED_TRACE(key);
      const size_t dot = key.find('.'), second = key.find('.', dot + 1);
      const std::string conversation = key.substr(0, dot);
      const bool add_generation_prompt = key.substr(dot + 1, 4) == "gen1";
      const std::string variant = second == std::string::npos ? "" : key.substr(second + 1);
      ctx.extra_json = golden["variants"][variant].dump();
      const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(golden["conversations"][conversation].dump());
      ASSERT_TRUE(expected["ok"].get<bool>());
      try {
        EXPECT_EQ(tmpl.render_json(messages, add_generation_prompt, ctx), expected["text"].get<std::string>());
      } catch (const ChatTemplateError& e) {
        ADD_FAILURE() << e.kind_name() << ": " << e.what();
      }
      ++checked;
    }
    EXPECT_EQ(checked, 12);
  }
}

TEST(ChatTemplateGolden, RenderingWithChatMessagesEqualsRenderingWithJson) {
  FAFO_REQUIRE_SHARED(file, "templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  const ChatTemplate tmpl = ChatTemplate::from_source(fafo::test::read_text(file));
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  EXPECT_EQ(tmpl.render(messages, true, context()), tmpl.render_json(j, true, context()));
}

// Tools, as Hugging Face passes them, reach the templates that format them.
TEST(ChatTemplateGolden, QwenFormatsToolsWithTojson) {
  FAFO_REQUIRE_SHARED(file, "templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  ChatTemplateContext ctx = context("", "<|im_end|>");
  ctx.extra_json = R"({"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})";
  const std::string text = ChatTemplate::from_source(fafo::test::read_text(file)).render({{"user", "Weather in Paris?"}}, true, ctx);
  EXPECT_CONTAINS(text, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": "
                        "\"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
                        "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>");
  EXPECT_CONTAINS(text, "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
}

// ---- built-in formats ---------------------------------------------------------------

TEST(BuiltinTemplates, NamesCoverTheCommonFormats) {
  const auto& names = fafo::builtin_chat_template_names();
  for (const char* n : {"chatml", "llama2", "llama3", "mistral", "phi3", "gemma", "deepseek-r1"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    const ChatTemplate t = ChatTemplate::builtin(n);
    EXPECT_EQ(t.name(), n);
    const std::string text = t.render({{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}}, true, context());
    for (const char* part : {"S", "U", "A", "V"}) EXPECT_CONTAINS(text, part);
  }
  try {
    ChatTemplate::builtin("nope");
    ADD_FAILURE() << "no error for an unknown name";
  } catch (const std::invalid_argument& e) {
    EXPECT_CONTAINS(e.what(), "'nope'");
    EXPECT_CONTAINS(e.what(), "chatml");
  }
}

TEST(BuiltinTemplates, RenderTheFormatsOfTheModelFamilies) {
  const std::vector<ChatMessage> conversation = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  const ChatTemplateContext ctx = context();
  EXPECT_EQ(ChatTemplate::builtin("chatml").render(conversation, true, ctx),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate::builtin("llama2").render(conversation, true, ctx),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
  EXPECT_EQ(ChatTemplate::builtin("llama3").render(conversation, true, context("<|begin_of_text|>", "<|eot_id|>")),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate::builtin("mistral").render(conversation, true, ctx),
            "<s>[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
  EXPECT_EQ(ChatTemplate::builtin("gemma").render(conversation, true, context("<bos>", "<eos>")),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  // Roles out of order are refused, as the models' own templates refuse them.
  EXPECT_THROW(ChatTemplate::builtin("llama2").render({{"assistant", "A"}}, true, ctx), ChatTemplateError);
  // Earlier reasoning is dropped from DeepSeek-R1 conversations.
  EXPECT_EQ(ChatTemplate::builtin("deepseek-r1").render({{"user", "Q"}, {"assistant", "<think>\nhm\n</think>\n\nA"}, {"user", "R"}}, true, ctx),
            "<s><｜User｜>Q<｜Assistant｜>\n\nA<｜end▁of▁sentence｜><｜User｜>R<｜Assistant｜><think>\n");
}

// Where a family's published template renders a plain conversation in the same
// format, the built-in one renders the golden text exactly.
TEST(BuiltinTemplates, MatchTheGoldenRenderingsOfTheirFamilies) {
  FAFO_REQUIRE_SHARED(renderings, "golden/templates/renderings.json");
  const nlohmann::json golden = nlohmann::json::parse(fafo::test::read_text(renderings));
  struct Match {
    const char* builtin;
    const char* golden_template;
    std::vector<std::string> keys;
  };
  const Match matches[] = {
      {"chatml", "Qwen-Qwen2.5-7B-Instruct", {"system_multiturn.gen1", "system_multiturn.gen0"}},
      {"phi3", "microsoft-Phi-3.5-mini-instruct", {"system_multiturn.gen1", "no_system.gen1"}},
      {"gemma", "google-gemma-2-2b-it", {"no_system.gen1", "no_system.gen0"}},
      {"deepseek-r1", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
       {"system_multiturn.gen1", "system_multiturn.gen0", "no_system.gen1", "no_system.gen0"}},
  };
  for (const Match& m : matches) {
    const auto& entry = golden["templates"][m.golden_template];
    const ChatTemplateContext ctx = context(entry["bos_token"], entry["eos_token"]);
    for (const std::string& key : m.keys) {
      SCOPED_TRACE(std::string(m.builtin) + " " + key);
      const std::string conversation = key.substr(0, key.find('.'));
      const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(golden["conversations"][conversation].dump());
      EXPECT_EQ(ChatTemplate::builtin(m.builtin).render_json(messages, key.ends_with("gen1"), ctx),
                entry["renderings"][key]["text"].get<std::string>());
    }
  }
}

TEST(BuiltinTemplates, RecogniseTheFormatOfRealTemplates) {
  FAFO_REQUIRE_SHARED(templates, "templates");
  const std::pair<const char*, const char*> expected[] = {
      {"Qwen-Qwen2.5-7B-Instruct", "chatml"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "chatml"},
      {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
      {"meta-llama-Llama-3.2-3B-Instruct", "llama3"},
      {"google-gemma-2-2b-it", "gemma"},
      {"microsoft-Phi-3.5-mini-instruct", "phi3"},
      {"mistralai-Mistral-Nemo-Instruct-2407", "mistral"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1"},
  };
  for (const auto& [file, name] : expected)
    EXPECT_EQ(fafo::builtin_template_name_for(fafo::test::read_text(templates / (std::string(file) + ".jinja"))).value_or("?"), name) << file;
  EXPECT_EQ(fafo::builtin_template_name_for("{{ messages[0].content }}"), std::nullopt);
  for (const std::string& n : fafo::builtin_chat_template_names())
    EXPECT_EQ(fafo::builtin_template_name_for(ChatTemplate::builtin(n).source()), n);
}

TEST(BuiltinTemplates, AssistantTurnEndIsTheTextClosingAReply) {
  EXPECT_EQ(ChatTemplate::builtin("chatml").assistant_turn_end(context()), "<|im_end|>");
  EXPECT_EQ(ChatTemplate::builtin("llama3").assistant_turn_end(context()), "<|eot_id|>");
  EXPECT_EQ(ChatTemplate::builtin("mistral").assistant_turn_end(context("<s>", "</s>")), "</s>");
  EXPECT_EQ(ChatTemplate::builtin("phi3").assistant_turn_end(context()), "<|end|>");
  EXPECT_EQ(ChatTemplate::builtin("gemma").assistant_turn_end(context()), "<end_of_turn>");
  EXPECT_EQ(ChatTemplate::from_source("{% for m in messages %}{{ m.content }}{% endfor %}").assistant_turn_end(context()), "");
  EXPECT_EQ(ChatTemplate::from_source("{{ raise_exception('no') }}").assistant_turn_end(context()), "");
}

}  // namespace
