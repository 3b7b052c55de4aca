// An agent written with the plain `openai` client: a loop that asks the model, runs the tool calls
// it makes, and asks again. Inside model.rollout, every call through model.openai() is captured.
//
//   npx tsx examples/frameworks/openai.ts
import type OpenAI from "openai";
import { LOOKUP, SYSTEM, trainAgent, type Agent } from "./task";

const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [{
  type: "function",
  function: { ...LOOKUP, parameters: { type: "object", properties: { name: { type: "string" } }, required: ["name"] } },
}];

const agent: Agent = async ({ model, lookupTown }, question) => {
  const client = model.openai(); // or: new OpenAI({ baseURL: model.baseURL, apiKey: model.apiKey, fetch: model.fetch })
  const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: "system", content: SYSTEM }, { role: "user", content: question }];
  for (let turn = 0; turn < 3; turn++) {
    const completion = await client.chat.completions.create({ model: model.inferenceName(), messages, tools, max_tokens: 48 });
    const message = completion.choices[0]!.message;
    messages.push(message);
    if (!message.tool_calls?.length) return message.content ?? "";
    for (const call of message.tool_calls) {
      if (call.type !== "function") continue;
      let name = "";
      try {
        name = String(JSON.parse(call.function.arguments).name ?? "");
      } catch { /* the tool says it found no such town */ }
      messages.push({ role: "tool", tool_call_id: call.id, content: await lookupTown(name) });
    }
  }
  return "";
};

void trainAgent("openai-agent", agent);
