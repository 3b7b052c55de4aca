// The lib helpers the cookbook notebooks share: parameters with env overrides, tagged answers,
// seeded randomness and evaluation summaries.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { z } from "zod";
import fs from "node:fs";
import path from "node:path";
import { extractTag, notebookParams, ParameterError, parseTagged, randomChoice, randomInt, rng, shuffled, summarize, takeTurn, Trajectory, turnDemonstrations } from "../../../lib/index";
import { tableText } from "../../../lib/display/table";
import { nearestName } from "../../../lib/core/options";
import { envName, PROJECT_VARIABLES } from "../../../lib/notebook/params";

describe("notebookParams", () => {
  const defaults = { baseModel: "builtin:tiny", steps: 100, learningRate: 1e-2, fresh: true };
  it("names variables ART_<SNAKE_CASE>", () => {
    assert.equal(envName("learningRate"), "ART_LEARNING_RATE");
    assert.equal(envName("baseModel"), "ART_BASE_MODEL");
  });
  it("takes defaults, then the smoke values, then environment variables parsed as the default's type", () => {
    const before = Date.now();
    const { startedAt, ...plain } = notebookParams(defaults, { env: {}, show: false });
    assert.deepEqual(plain, { ...defaults, smoke: false });
    assert.ok(startedAt >= before && startedAt <= Date.now(), "startedAt is when the cell ran");
    const smoke = notebookParams(defaults, { smoke: { steps: 3 }, env: { ART_SMOKE: "1" }, show: false });
    assert.equal(smoke.steps, 3);
    assert.equal(smoke.smoke, true);
    const env = notebookParams(defaults, { smoke: { steps: 3 }, show: false,
      env: { ART_SMOKE: "1", ART_STEPS: "7", ART_LEARNING_RATE: "3e-4", ART_FRESH: "false", ART_BASE_MODEL: "Qwen/Qwen2.5-1.5B-Instruct" } });
    assert.deepEqual({ ...env, startedAt: 0 }, { startedAt: 0, baseModel: "Qwen/Qwen2.5-1.5B-Instruct", steps: 7, learningRate: 3e-4, fresh: false, smoke: true });
  });
  it("rejects a value that does not parse, naming the variable", () => {
    assert.throws(() => notebookParams(defaults, { env: { ART_STEPS: "many" }, show: false }), (e: Error) =>
      e instanceof ParameterError && e.message.includes("ART_STEPS") && e.message.includes("not a number"));
    assert.throws(() => notebookParams(defaults, { env: { ART_FRESH: "maybe" }, show: false }), /ART_FRESH.*boolean/);
  });
  it("shows numbers as they were written (3e-4 is 0.0003, not 0.000)", () => {
    const rows = [{ parameter: "learningRate", value: 3e-4 }, { parameter: "sftLearningRate", value: 5e-4 }, { parameter: "steps", value: 16 }];
    const text = tableText(rows, { digits: "exact" });
    for (const shown of ["0.0003", "0.0005", "16"]) assert.ok(text.includes(shown), `${shown} missing from\n${text}`);
  });
  it("names the close parameter of an ART_ variable that no parameter reads, in each run of the parameters cell", () => {
    const lines: string[] = [];
    const warn = console.warn;
    console.warn = (line: string) => lines.push(line);
    try {
      const rl = { rlSteps: 16, learningRate: 3e-4 };
      notebookParams(rl, { env: { ART_STEPS: "6", ART_RL_STEPZ_UNUSED_OTHER: "1", ART_SERVER_URL: "http://x", ART_SMOKE: "1" }, show: false });
      notebookParams(rl, { env: { ART_STEPS: "6" }, show: false });
    } finally {
      console.warn = warn;
    }
    assert.equal(lines.filter((l) => l.includes("ART_STEPS")).length, 2, lines.join("\n"));
    assert.match(lines.find((l) => l.includes("ART_STEPS"))!, /did you mean ART_RL_STEPS \(rlSteps\)\?/);
    assert.ok(!lines.some((l) => /ART_SERVER_URL|ART_SMOKE/.test(l)), "the project's own variables are not parameters to suggest");
    assert.equal(nearestName("ART_LEARNIGN_RATE", ["ART_LEARNING_RATE", "ART_STEPS"]), "ART_LEARNING_RATE");
    assert.equal(nearestName("ART_DEVICE_X", ["ART_STEPS"]), undefined);
    assert.equal(nearestName("ART_SEED", ["ART_EVAL_SEED", "ART_STEPS"]), "ART_EVAL_SEED");
  });
  it("knows every ART_ variable the server and the project's tools read", () => {
    const root = path.resolve(__dirname, "../../..");
    const read = new Set<string>();
    const config = fs.readFileSync(path.join(root, "gpu-server/art_server/core/config.py"), "utf8");
    for (const m of config.matchAll(/_env\("([A-Z0-9_]+)"/g)) read.add(`ART_${m[1]}`);
    const sources = ["lib", "scripts", "kernel", "gpu-server/art_server", "gpu-server/tests"].flatMap((dir) => fs.readdirSync(path.join(root, dir), { recursive: true })
      .map(String).filter((f) => /\.(ts|mjs|cjs|py)$/.test(f)).map((f) => path.join(root, dir, f)));
    for (const file of sources) {
      for (const m of fs.readFileSync(file, "utf8").matchAll(/(?:env\.|env\[["']|environ(?:\.get)?\(["']|getenv\(["'])(ART_[A-Z0-9_]+)/g)) read.add(m[1]!);
    }
    // npm run cookbook -- --seed N sets a parameter every cookbook notebook has (seed -> ART_SEED): not a project variable.
    const parameterCells = fs.readdirSync(path.join(root, "notebooks")).filter((f) => f.endsWith(".ipynb")).map((file) => {
      const cells = JSON.parse(fs.readFileSync(path.join(root, "notebooks", file), "utf8")).cells as Array<{ source: string[] }>;
      const source = cells.map((c) => c.source.join("")).find((text) => text.includes("notebookParams({"))!;
      return source.slice(0, source.indexOf("}, {"));
    });
    const everyNotebookReads = (name: string) =>
      parameterCells.every((cell) => [...cell.matchAll(/^\s*([a-zA-Z]+):/gm)].some((m) => envName(m[1]!) === name));
    assert.ok(everyNotebookReads("ART_SEED") && !everyNotebookReads("ART_SERVER_URL"));
    const missing = [...read].filter((name) => !PROJECT_VARIABLES.has(name) && !everyNotebookReads(name));
    assert.deepEqual(missing, [], "add these to PROJECT_VARIABLES in lib/notebook/params.ts");
  });
});

describe("parseTagged", () => {
  const Cell = z.enum(["A1", "B2"]);
  it("reads the first tag and checks it with the schema", () => {
    assert.deepEqual(parseTagged("I play <move> B2 </move> then <move>A1</move>", "move", Cell), { ok: true, value: "B2", raw: "B2" });
    assert.equal(extractTag("<move>B2", "move"), null);
  });
  it("says whether the tag is missing or its content invalid", () => {
    const missing = parseTagged("B2", "move", Cell);
    assert.equal(missing.ok, false);
    assert.equal(!missing.ok && missing.reason, "missing");
    const invalid = parseTagged("<move>D4</move>", "move", Cell);
    assert.equal(!invalid.ok && invalid.reason, "invalid");
    assert.match(!invalid.ok ? invalid.message : "", /<move>D4<\/move> is not valid/);
    assert.deepEqual(parseTagged("<move>2</move>", "move", z.coerce.number().int().max(3)), { ok: true, value: 2, raw: "2" });
  });
});

describe("seeded randomness", () => {
  it("repeats for a seed and differs across seeds", () => {
    const a = rng(42), b = rng(42), c = rng(43);
    const xs = [a(), a(), a()];
    assert.deepEqual(xs, [b(), b(), b()]);
    assert.notDeepEqual(xs, [c(), c(), c()]);
    assert.ok(xs.every((x) => x >= 0 && x < 1));
  });
  it("draws ints in range, choices from the list, and permutations", () => {
    const r = rng(1);
    const ints = Array.from({ length: 200 }, () => randomInt(r, 1, 3));
    assert.deepEqual([...new Set(ints)].sort(), [1, 2, 3]);
    assert.ok(["x", "y"].includes(randomChoice(r, ["x", "y"])));
    assert.throws(() => randomChoice(r, []), /empty/);
    assert.deepEqual(shuffled(r, [1, 2, 3, 4, 5]).sort(), [1, 2, 3, 4, 5]);
  });
});

describe("summarize", () => {
  it("averages reward and each metric over the trajectories that carry it (booleans as rates)", () => {
    const t = (reward: number, metrics: Record<string, number | boolean>) => new Trajectory({ reward, metrics });
    const s = summarize("p", [t(1, { win: true, moves: 3 }), t(0, { win: false, moves: 5 }), t(-1, { win: false })]);
    assert.equal(s.label, "p");
    assert.equal(s.trajectories, 3);
    assert.equal(s.reward, 0);
    assert.equal(s.win, 1 / 3);
    assert.equal(s.moves, 4);
  });
});

describe("takeTurn", () => {
  it("pushes the turn's message and a scripted player's reply, and returns the reply", async () => {
    const t = new Trajectory({ messagesAndChoices: [{ role: "system", content: "rules" }] });
    const reply = await takeTurn(t, "board 1", () => "<move>B2</move>", { maxTokens: 4, seed: 0 });
    assert.equal(reply, "<move>B2</move>");
    assert.deepEqual(t.messages(), [{ role: "system", content: "rules" }, { role: "user", content: "board 1" },
      { role: "assistant", content: "<move>B2</move>" }]);
  });
});

describe("turnDemonstrations", () => {
  it("makes one conversation per answer: the system message, that turn's message and the answer", async () => {
    const t = new Trajectory({ messagesAndChoices: [{ role: "system", content: "rules" }] });
    await takeTurn(t, "board 1", () => "B2", { maxTokens: 4, seed: 0 });
    await takeTurn(t, "board 2", () => "A1", { maxTokens: 4, seed: 0 });
    t.push({ role: "user", content: "you won" });  // a last message with no answer teaches nothing
    assert.deepEqual(turnDemonstrations(t), [
      { messages: [{ role: "system", content: "rules" }, { role: "user", content: "board 1" }, { role: "assistant", content: "B2" }] },
      { messages: [{ role: "system", content: "rules" }, { role: "user", content: "board 2" }, { role: "assistant", content: "A1" }] },
    ]);
    const bare = new Trajectory({ messagesAndChoices: [{ role: "user", content: "q" }, { role: "assistant", content: "a" }] });
    assert.deepEqual(turnDemonstrations(bare), [{ messages: [{ role: "user", content: "q" }, { role: "assistant", content: "a" }] }]);
  });
});
