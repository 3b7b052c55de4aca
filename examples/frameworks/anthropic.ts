// An agent written with Anthropic's SDK: messages.create in a tool loop (tool_use blocks in,
// tool_result blocks back). The client takes the server's root URL (the SDK adds /v1 itself), the
// model's key (sent as x-api-key) and its fetch; inside model.rollout every call is captured.
// (The AI SDK's Anthropic provider: createAnthropic({ baseURL: model.baseURL, apiKey, fetch }).)
//
//   npx tsx examples/frameworks/anthropic.ts
import Anthropic from "@anthropic-ai/sdk";
import { LOOKUP, SYSTEM, trainAgent, type Agent } from "./task";

const agent: Agent = async ({ model, lookupTown }, question) => {
  const client = new Anthropic({ baseURL: model.serverURL, apiKey: model.apiKey, fetch: model.fetch });
  const tools = [{ ...LOOKUP, input_schema: { type: "object" as const, properties: { name: { type: "string" } }, required: ["name"] } }];
  const messages: Anthropic.MessageParam[] = [{ role: "user", content: question }];
  for (let turn = 0; turn < 3; turn++) {
    const message = await client.messages.create({ model: model.inferenceName(), system: SYSTEM, max_tokens: 48, tools, messages });
    messages.push({ role: "assistant", content: message.content });
    const uses = message.content.flatMap((block) => (block.type === "tool_use" ? [block] : []));
    if (message.stop_reason !== "tool_use" || !uses.length) {
      return message.content.map((block) => (block.type === "text" ? block.text : "")).join("");
    }
    const results = await Promise.all(uses.map(async (use) => ({
      type: "tool_result" as const, tool_use_id: use.id, content: await lookupTown(String((use.input as { name?: unknown }).name ?? "")),
    })));
    messages.push({ role: "user", content: results });
  }
  return "";
};

void trainAgent("anthropic-agent", agent);
