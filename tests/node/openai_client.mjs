// The official openai client (npm) against a running `fafo serve`: a chat completion,
// the same one streamed, and a completion; prints one JSON object with the texts and
// usage so tests/test_server.cpp can compare them with plain greedy generation.
// Usage: node openai_client.mjs BASE_URL API_KEY MODEL
import OpenAI from "openai";

const [baseURL, apiKey, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const messages = [{ role: "user", content: "Tell me a story." }];

const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
let streamed = "";
let chunks = 0;
const stream = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true });
for await (const chunk of stream) {
  chunks += 1;
  streamed += chunk.choices[0]?.delta?.content ?? "";
}
const completion = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 24, temperature: 0 });
let missing = "";
try {
  await client.chat.completions.create({ model: "no-such-model", messages });
} catch (e) {
  missing = `${e.status} ${e.error?.code ?? ""}`;
}
console.log(JSON.stringify({
  chat: chat.choices[0].message.content,
  chat_usage: chat.usage,
  streamed,
  chunks,
  completion: completion.choices[0].text,
  missing,
}));
