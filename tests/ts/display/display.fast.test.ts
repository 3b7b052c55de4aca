import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { historyFigure, inNotebook, notice, ProgressLine, Trajectory, trajectoryHtml, trajectoryText } from "../../../lib/index";
import { noticeHtml } from "../../../lib/display/notice";
import { PLOTLY_STATIC_PATH, plotlyHtml } from "../../../lib/display/plotly";
import { formatProgress } from "../../../lib/display/progress-line";
import { tableHtml, tableText } from "../../../lib/display/table";
import { smooth } from "../../../lib/notebook/history-plot";

/** Runs `fn` with process.stdout.write captured; returns what it wrote, chunk by chunk. */
function captureStdout(fn: () => void): string[] {
  const chunks: string[] = [];
  const write = process.stdout.write;
  process.stdout.write = ((chunk: string) => chunks.push(chunk) > 0) as typeof process.stdout.write;
  try {
    fn();
  } finally {
    process.stdout.write = write;
  }
  return chunks;
}

describe("display helpers outside a notebook", () => {
  it("know they are not in a kernel", () => {
    assert.equal(inNotebook(), false);
  });

  it("format a progress line with a bar, a count and a percentage", () => {
    assert.equal(formatProgress("rollouts", { done: 5, total: 10, detail: "reward 0.50" }, 10), "rollouts [#####-----] 5/10 50% reward 0.50");
    assert.equal(formatProgress("steps", { done: 3 }), "steps 3");
    assert.equal(formatProgress("over", { done: 12, total: 10 }, 4), "over [####] 12/10 100%");
  });

  it("print a progress line at most once per interval in log mode, and always the final state", () => {
    const lines = captureStdout(() => {
      const progress = new ProgressLine("work", { mode: "log", logIntervalMs: 60_000 });
      for (let i = 1; i <= 100; i++) progress.update({ done: i, total: 100 });
      progress.finish({ done: 100, total: 100 });
      progress.finish({ done: 100, total: 100 });
    });
    assert.deepEqual(lines, ["work [--------------------] 1/100 1%\n", "work [####################] 100/100 100%\n"]);
  });

  it("rewrite one terminal line with a carriage return in tty mode", () => {
    const chunks = captureStdout(() => {
      const progress = new ProgressLine("tty", { mode: "tty", minIntervalMs: 0 });
      progress.update({ done: 1, total: 2 });
      progress.finish({ done: 2, total: 2 });
    });
    assert.equal(chunks.length, 2);
    assert.ok(chunks.every((c) => c.startsWith("\r\x1b[2K")));
    assert.ok(chunks[1]?.endsWith("\n") && !chunks[0]?.endsWith("\n"));
  });

  it("render records and danfo-shaped frames as aligned text and escaped HTML", () => {
    const rows = [{ step: 1, reward: 0.25, note: "<b>" }, { step: 10, reward: 1, note: "ok" }];
    assert.equal(tableText(rows), ["step  reward  note", "----  ------  ----", "   1   0.250  <b>", "  10       1  ok"].join("\n"));
    assert.match(tableHtml(rows), /<td>&lt;b&gt;<\/td>/);
    const frame = { columns: ["a", "b"], values: [[1, 2], [3, 4]] };
    assert.equal(tableText(frame, { maxRows: 1 }), ["a  b", "-  -", "1  2", "... 1 more rows"].join("\n"));
  });

  it("embed plotly.js in the HTML fallback only when asked, with script-safe data", () => {
    const figure = { data: [{ type: "scatter", y: [1, 2], name: "</script><b>" }] };
    const first = plotlyHtml(figure, "fig-1", true);
    const later = plotlyHtml(figure, "fig-2", false);
    assert.match(first, /plotly\.js v\d/);
    assert.doesNotMatch(later, /plotly\.js v\d/);
    assert.ok(!later.includes("</script><b>"), "data must not close the script tag");
    assert.match(later, /Plotly\.newPlot\("fig-2"/);
  });

  it("smooth a noisy series with a bias-corrected moving average", () => {
    assert.deepEqual(smooth([1, 1, 1]), [1, 1, 1], "no pull toward 0 at the start");
    assert.deepEqual(smooth([0, 1, 0], 0), [0, 1, 0]);
    const s = smooth([0, 1, 0, 1, 0, 1], 0.6);
    assert.ok(Math.max(...s.slice(2)) - Math.min(...s.slice(2)) < 0.5, `not smoother: ${s}`);
  });

  it("draw several metrics as stacked panels that share the step axis, val as markers, a smoothed train line", () => {
    const rows = [0, 1, 2, 3].flatMap((step) => [
      { step, split: "train", reward: step / 4, loss: 1 - step / 4, win: step % 2 },
      ...(step % 2 === 0 ? [{ step, split: "val", reward: step / 5, loss: 0.5, win: 0 }] : []),
    ]);
    const figure = historyFigure(rows, ["reward", "loss", "win"]);
    const layout = figure.layout as Record<string, { domain?: [number, number]; anchor?: string; dtick?: number }>;
    const domains = ["yaxis", "yaxis2", "yaxis3"].map((k) => layout[k]!.domain!);
    for (let i = 1; i < domains.length; i++) assert.ok(domains[i]![1] < domains[i - 1]![0], `panels overlap: ${JSON.stringify(domains)}`);
    assert.equal(layout.xaxis!.anchor, "y3", "the step axis sits under the bottom panel");
    assert.equal(layout.xaxis!.dtick, 1);
    const metas = figure.data.map((t) => t.meta as { split: string; metric: string; smoothed: boolean });
    assert.equal(metas.filter((m) => m.metric === "reward").length, 3, "train, train smoothed, val");
    const val = figure.data.find((t) => (t.meta as { split: string }).split === "val" && t.yaxis === "y2")!;
    assert.equal((val.marker as { symbol: string }).symbol, "diamond");
    assert.equal(figure.data.filter((t) => t.showlegend).length, 3, "each legend entry once");
    assert.equal(metas[0]!.split, "train", "training splits come first (and keep the first colour)");
  });

  it("keep the step-0 marker inside the axis, the legend's names from the first point, re-runs as marks and a caption", () => {
    const rows = (n: number) => Array.from({ length: n }, (_, step) => ({ step, split: "train", reward: step / 10 }));
    const names = (n: number) => historyFigure([...rows(n), { step: 0, split: "val", reward: 0.5 }]).data.filter((t) => t.showlegend).map((t) => t.name);
    assert.deepEqual(names(1), ["train (per step)", "val"]);
    assert.deepEqual(names(3), ["train (per step)", "train (smoothed)", "val"], "the per-step entry keeps its name; the smoothed one joins");
    const figure = historyFigure(rows(4), ["reward"], { marks: [{ step: 1.5, label: "run from step 2 (14:02)" }], caption: "train: sampled" });
    const layout = figure.layout as { xaxis: { range: number[] }; shapes: Array<{ x0: number }>; annotations: Array<{ text: string }>;
      title: { subtitle?: { text: string } } };
    assert.deepEqual(layout.xaxis.range, [-0.5, 3.5], "half a step of room at both ends");
    assert.deepEqual(layout.shapes.map((s) => s.x0), [1.5]);
    assert.deepEqual(layout.annotations.map((a) => a.text), ["run from step 2 (14:02)"]);
    assert.equal(layout.title.subtitle?.text, "train: sampled");
  });

  it("load plotly.js in a Lab page from the Jupyter server, not from the output", () => {
    const html = plotlyHtml({ data: [{ type: "scatter", y: [1] }] }, "fig-3", false);
    assert.ok(html.length < 2000, `a chart output is ${html.length} bytes`);
    assert.match(html, /jupyter-config-data/);
    assert.ok(html.includes(`"${PLOTLY_STATIC_PATH}"`));
  });

  it("render a trajectory as a transcript with roles, tool calls, reward, metrics and logprob-shaded tokens", () => {
    const completion = {
      id: "c", object: "chat.completion", created: 0, model: "m", prompt_token_ids: [1, 2],
      choices: [{ index: 0, finish_reason: "stop", token_ids: [5, 6], message: { role: "assistant", content: "B2<", refusal: null },
        logprobs: { content: [{ token: "B2", logprob: -0.01, bytes: [], top_logprobs: [] }, { token: "<", logprob: -3, bytes: [], top_logprobs: [] }] } }],
    };
    const t = new Trajectory({ messagesAndChoices: [{ role: "system", content: "rules" }, { role: "user", content: "board" }], reward: 0.5, metrics: { win: true } });
    t.push(completion as never);
    t.push({ role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "move", arguments: "{\"cell\":\"B2\"}" } }] });
    t.push({ role: "tool", tool_call_id: "call_1", content: "ok" });
    const html = trajectoryHtml(t, { title: "a game" });
    assert.match(html, /reward 0\.500 · win true/);
    assert.equal((html.match(/class="art-token"/g) ?? []).length, 2);
    assert.match(html, /&lt;/, "token text is escaped");
    assert.match(html, /logprob -3\.000/);
    assert.match(html, /→ <b>move<\/b>\(\{&quot;cell&quot;:&quot;B2&quot;\}\)/);
    assert.match(html, /art-role-tool/);
    const text = trajectoryText(t, { hideSystem: true });
    assert.doesNotMatch(text, /rules/);
    assert.match(text, /\[assistant \(sampled\)\] B2</);
    assert.match(text, /-> move\(/);
  });

  it("show a notice once per key as one [art] line on stderr in a terminal", () => {
    const warned: string[] = [];
    const warn = console.warn;
    console.warn = (m: string) => warned.push(m);
    try {
      const seen = new Set<string>();
      assert.equal(notice("flat groups", { key: "flat", seen }), true);
      assert.equal(notice("flat groups again", { key: "flat", seen }), false);
    } finally {
      console.warn = warn;
    }
    assert.deepEqual(warned, ["[art] flat groups"]);
    assert.match(noticeHtml("<x>"), /class="art-notice art-notice-warning".*&lt;x&gt;/);
  });
});
