// generateScenarios against a local generator: an HTTP server that speaks the chat-completions
// protocol and answers from a script (malformed replies, malformed tasks, duplicates, tasks outside
// the difficulty range, then good ones), called through the real openai client of `new Model`.
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { ConfigurationError, generateScenarios, Model, ScenarioGenerationError, type McpToolInfo, type ScenarioProgress } from "../../../lib/index";

const TOOLS: McpToolInfo[] = [
  { name: "town_population", description: "The population of a town", inputSchema: { type: "object", properties: { town: { type: "string" } } } },
  { name: "distance_km", description: "Road distance between two towns", inputSchema: { type: "object", properties: { from: { type: "string" }, to: { type: "string" } } } },
];

/** A chat-completions endpoint that replies with the next scripted text and keeps each request's messages. */
class ScriptedGenerator {
  readonly requests: Array<{ messages: Array<{ role: string; content: string }>; temperature?: number; response_format?: any }> = [];
  private replies: string[] = [];
  private server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      this.requests.push(JSON.parse(body));
      const content = this.replies.shift() ?? "no more scripted replies";
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({
        id: `c${this.requests.length}`, object: "chat.completion", created: 0, model: "generator",
        choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content } }],
        usage: { prompt_tokens: 10, completion_tokens: 10, total_tokens: 20 },
      }));
    });
  });
  url = "";

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
  }
  script(...replies: string[]): void {
    this.replies = replies;
    this.requests.length = 0;
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

const reply = (...items: unknown[]) => JSON.stringify({ scenarios: items });

describe("generateScenarios", () => {
  const generator = new ScriptedGenerator();
  let model: Model;
  before(async () => {
    await generator.start();
    model = new Model({ name: "generator", baseURL: generator.url, apiKey: "local" });
  });
  after(() => generator.close());

  it("drops unreadable replies, malformed tasks, duplicates and off-range difficulties, and asks again until it has count", async () => {
    generator.script(
      "Sure! Here are some tasks: 1. Find the population",  // no JSON at all
      `Here you go:\n${reply(
        { task: "How many people live in Lyon?", difficulty: 1 },
        { task: "How many people live in Lyon?", difficulty: 1 },  // a duplicate within the reply
        { task: "short", difficulty: 2 },                          // malformed: too short
        { task: "How far is Paris from Nice by road?", difficulty: 9 },  // malformed: difficulty 1..5
        { task: "Which of Lyon, Nice and Lille is the largest, and how far is it from Paris?", difficulty: 5 },  // off range (max 4)
      )}`,
      reply(
        { task: "how many people live in LYON", difficulty: 1 },  // a duplicate: case and punctuation aside
        { task: "What is the road distance from Lille to Lyon?", difficulty: 2 },
        { task: "Is Nice more than 500 km from Paris by road, and how many people live there?", difficulty: 3, extra: true },  // malformed: unknown key
        { task: "Is Nice more than 500 km from Paris by road, and how many people live there?", difficulty: 3 },
      ),
    );
    const seen: ScenarioProgress[] = [];
    const scenarios = await generateScenarios(TOOLS, { model, count: 3, difficulty: { max: 4 }, progress: false, onProgress: (p) => seen.push(p) });
    assert.deepEqual(scenarios, [
      { task: "How many people live in Lyon?", difficulty: 1 },
      { task: "What is the road distance from Lille to Lyon?", difficulty: 2 },
      { task: "Is Nice more than 500 km from Paris by road, and how many people live there?", difficulty: 3 },
    ]);
    assert.equal(generator.requests.length, 3);
    assert.deepEqual(seen.at(-1), { kept: 3, count: 3, calls: 3, dropped: { unreadable: 1, malformed: 3, duplicate: 2, offRange: 1, rejected: 0 } });
    // Each call shows the tools, asks for what is missing, and names the tasks kept so far.
    const prompt = (i: number) => generator.requests[i]!.messages.map((m) => m.content).join("\n");
    assert.match(prompt(0), /town_population: The population of a town/);
    assert.match(prompt(0), /Write 3 new tasks with difficulty from 1 to 4/);
    assert.match(prompt(2), /Write 2 new tasks/);
    assert.match(prompt(2), /Tasks already written \(write different ones\):\n- How many people live in Lyon\?/);
    assert.equal(generator.requests[0]!.temperature, 1);
    // The reply's shape goes along as a JSON schema (the art server enforces it while sampling),
    // with the batch size and the difficulty range.
    const format = generator.requests[2]!.response_format;
    assert.equal(format.type, "json_schema");
    assert.equal(format.json_schema.name, "scenarios");
    assert.equal(format.json_schema.schema.properties.scenarios.maxItems, 2);
    assert.deepEqual(format.json_schema.schema.properties.scenarios.items.properties.difficulty, { enum: [1, 2, 3, 4] });
  });

  it("drops the tasks `accept` turns down and asks for more", async () => {
    generator.script(
      reply({ task: "How many people live in Atlantis?", difficulty: 1 }, { task: "How many people live in Lyon?", difficulty: 1 }),
      reply({ task: "How far is Lyon from Lille?", difficulty: 2 }),
    );
    const known = /Lyon|Lille|Nice/;
    const seen: ScenarioProgress[] = [];
    const scenarios = await generateScenarios(TOOLS, { model, count: 2, progress: false, accept: (s) => known.test(s.task), onProgress: (p) => seen.push(p) });
    assert.deepEqual(scenarios.map((s) => s.task), ["How many people live in Lyon?", "How far is Lyon from Lille?"]);
    assert.equal(seen.at(-1)!.dropped.rejected, 1);
  });

  it("leaves response_format out when structuredOutput is false", async () => {
    generator.script(reply({ task: "How many people live in Lyon?", difficulty: 1 }));
    await generateScenarios(TOOLS, { model, count: 1, progress: false, structuredOutput: false });
    assert.equal(generator.requests[0]!.response_format, undefined);
  });

  it("throws with what it has when the generator cannot write enough within maxCalls, never a short list", async () => {
    generator.script(reply({ task: "How many people live in Lyon?", difficulty: 1 }), reply({ task: "How many people live in Lyon?", difficulty: 1 }), "{ not json");
    await assert.rejects(
      generateScenarios(TOOLS, { model, count: 4, maxCalls: 3, progress: false }),
      (error: unknown) => {
        assert.ok(error instanceof ScenarioGenerationError);
        assert.match(error.message, /generator wrote 1 valid, distinct scenarios of the 4 asked for in 3 calls \(dropped: 1 unreadable reply, 1 duplicate\)/);
        assert.deepEqual(error.scenarios, [{ task: "How many people live in Lyon?", difficulty: 1 }]);
        assert.equal(error.outputs.length, 3);
        return true;
      },
    );
  });

  it("checks its options before calling the generator", async () => {
    generator.script();
    await assert.rejects(generateScenarios(TOOLS, { model, count: 0 }), ConfigurationError);
    await assert.rejects(generateScenarios(TOOLS, { model, count: 2, difficulty: { min: 4, max: 2 } }), /min must not be above max/);
    await assert.rejects(generateScenarios([], { model, count: 2 }), /lists no tools/);
    assert.equal(generator.requests.length, 0);
  });
});
