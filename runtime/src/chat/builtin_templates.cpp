// Built-in chat formats. Each is a small Jinja template written for fafo; where a
// model family's published template renders a plain conversation (no tools) the
// same way, tests check that these match its golden renderings.
#include "chat/builtin_templates.h"

namespace fafo::chat {

namespace {

// <|im_start|>role\ncontent<|im_end|>\n (Qwen, Hermes, SmolLM, many fine-tunes).
constexpr std::string_view kChatml = R"JINJA(
{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)JINJA";

// Llama 2 chat: <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] reply </s><s>[INST] ...
constexpr std::string_view kLlama2 = R"JINJA(
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system_text = messages[0]['content'] | trim -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system_text = '' -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('llama2 format: after an optional system message, roles must alternate user/assistant') -}}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {%- set text = message['content'] | trim -%}
    {%- if loop.first and system_text -%}
      {%- set text = '<<SYS>>\n' + system_text + '\n<</SYS>>\n\n' + text -%}
    {%- endif -%}
    {{- bos_token + '[INST] ' + text + ' [/INST]' -}}
  {%- else -%}
    {{- ' ' + message['content'] | trim + ' ' + eos_token -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

// Llama 3.x without tools or the date header: <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>.
constexpr std::string_view kLlama3 = R"JINJA(
{{- bos_token -}}
{%- for message in messages -%}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)JINJA";

// Mistral Instruct v0.1-v0.3: <s>[INST] user [/INST]reply</s>[INST] ...; a system
// message goes before the first user message.
constexpr std::string_view kMistral = R"JINJA(
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system_text = messages[0]['content'] | trim -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system_text = '' -%}
  {%- set turns = messages -%}
{%- endif -%}
{{- bos_token -}}
{%- for message in turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('mistral format: after an optional system message, roles must alternate user/assistant') -}}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {%- set text = message['content'] -%}
    {%- if loop.first and system_text -%}
      {%- set text = system_text + '\n\n' + text -%}
    {%- endif -%}
    {{- '[INST] ' + text + ' [/INST]' -}}
  {%- else -%}
    {{- message['content'] + eos_token -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

// Phi-3 / Phi-3.5: <|role|>\ncontent<|end|>\n.
constexpr std::string_view kPhi3 = R"JINJA(
{%- for message in messages -%}
  {%- if message['role'] not in ['system', 'user', 'assistant'] -%}
    {{- raise_exception('phi3 format: unknown role ' + message['role']) -}}
  {%- endif -%}
  {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|assistant|>\n' -}}
{%- endif -%}
)JINJA";

// Gemma / Gemma 2: <start_of_turn>user|model\ncontent<end_of_turn>\n. Gemma has no
// system role: system text goes at the start of the next turn.
constexpr std::string_view kGemma = R"JINJA(
{{- bos_token -}}
{%- set ns = namespace(system='') -%}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {%- set ns.system = ns.system + message['content'] | trim + '\n\n' -%}
  {%- else -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{- '<start_of_turn>' + role + '\n' + ns.system + message['content'] | trim + '<end_of_turn>\n' -}}
    {%- set ns.system = '' -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<start_of_turn>model\n' -}}
{%- endif -%}
)JINJA";

// DeepSeek-R1 (and its Llama / Qwen distills): system text first, then
// <｜User｜>...<｜Assistant｜>reply<｜end▁of▁sentence｜>; earlier replies lose their
// reasoning (the text up to </think>); the reply opens with <think>\n.
constexpr std::string_view kDeepseekR1 = R"JINJA(
{{- bos_token -}}
{%- for message in messages if message['role'] == 'system' -%}
{{- message['content'] -}}
{%- endfor -%}
{%- for message in messages -%}
  {%- if message['role'] == 'user' -%}
    {{- '<｜User｜>' + message['content'] -}}
  {%- elif message['role'] == 'assistant' -%}
    {%- set content = message['content'] -%}
    {%- if '</think>' in content -%}
      {%- set content = content.split('</think>')[-1] -%}
    {%- endif -%}
    {{- '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<｜Assistant｜><think>\n' -}}
{%- endif -%}
)JINJA";

}  // namespace

const std::vector<BuiltinTemplate>& builtin_templates() {
  static const std::vector<BuiltinTemplate> all = {
      {"chatml", kChatml},
      {"llama2", kLlama2},
      {"llama3", kLlama3},
      {"mistral", kMistral},
      {"phi3", kPhi3},
      {"gemma", kGemma},
      {"deepseek-r1", kDeepseekR1},
  };
  return all;
}

const BuiltinTemplate* find_builtin_template(std::string_view name) {
  for (const BuiltinTemplate& t : builtin_templates())
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace fafo::chat
