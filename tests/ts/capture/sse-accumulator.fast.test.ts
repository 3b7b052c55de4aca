// The SSE accumulator that capture records streamed calls with: a completion rebuilt from chunks
// split anywhere (tool-call fragments, token ids, logprobs), and nothing from a broken stream.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SseAccumulator } from "../../../lib/capture/sse-accumulator";

describe("the SSE accumulator", () => {
  it("rebuilds a completion from chunks split anywhere, with tool-call fragments, token ids and logprobs", () => {
    const events = [
      { id: "c1", model: "m", created: 1, prompt_token_ids: [1, 2, 3], choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] },
      { id: "c1", model: "m", created: 1, choices: [{ index: 0, delta: { content: "Hé" }, token_ids: [7], logprobs: { content: [{ token: "Hé", logprob: -0.5 }] }, finish_reason: null }] },
      { id: "c1", model: "m", created: 1, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "add", arguments: '{"a":' } }] }, token_ids: [8, 9], logprobs: { content: [{ logprob: -1 }, { logprob: -2 }] }, finish_reason: null }] },
      { id: "c1", model: "m", created: 1, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: " 1}" } }] }, token_ids: [], finish_reason: "tool_calls", art_provenance: "art1:x:y:z" }] },
    ];
    const text = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") + "data: [DONE]\n\n";
    for (const size of [1, 7, text.length]) {
      const acc = new SseAccumulator();
      for (let i = 0; i < text.length; i += size) acc.push(text.slice(i, i + size));
      const completion = acc.finish() as unknown as Record<string, any>;
      assert.ok(acc.done);
      assert.deepEqual(completion.prompt_token_ids, [1, 2, 3]);
      const choice = completion.choices[0];
      assert.deepEqual(choice.token_ids, [7, 8, 9]);
      assert.deepEqual(choice.logprobs.content.map((e: { logprob: number }) => e.logprob), [-0.5, -1, -2]);
      assert.equal(choice.message.content, "Hé");
      assert.deepEqual(choice.message.tool_calls, [{ id: "call_1", type: "function", function: { name: "add", arguments: '{"a": 1}' } }]);
      assert.equal(choice.finish_reason, "tool_calls");
      assert.equal(choice.art_provenance, "art1:x:y:z");
    }
  });

  it("gives nothing for a stream that carried an error or ended before its choice finished", () => {
    const cut = new SseAccumulator();
    cut.push(`data: ${JSON.stringify({ id: "c", model: "m", created: 1, choices: [{ index: 0, delta: { content: "a" }, finish_reason: null }] })}\n\n`);
    assert.equal(cut.finish(), undefined);
    const failed = new SseAccumulator();
    failed.push(`data: ${JSON.stringify({ error: { message: "generation failed" } })}\n\n`);
    assert.equal(failed.finish(), undefined);
    assert.equal(failed.error, "generation failed");
  });
});

