// The evaluation's 95% intervals (Wilson's for a rate, Student's t for a mean) and the run's
// verdict that every notebook shows and writes as notebooks/results/<notebook>.json.
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { interval95, reportResults, summarize, Trajectory, type EvalResult } from "../../../lib/index";
import { studentT95, wilson95 } from "../../../lib/notebook/interval";

describe("studentT95", () => {
  it("matches the published two-sided 95% quantiles within 0.001", () => {
    const table: Array<[number, number]> = [[1, 12.706], [2, 4.303], [7, 2.365], [8, 2.306], [11, 2.201], [12, 2.179], [3, 3.182], [4, 2.776], [5, 2.571], [6, 2.447], [9, 2.262],
      [10, 2.228], [15, 2.131], [20, 2.086], [23, 2.069], [30, 2.042], [47, 2.012], [63, 1.998], [120, 1.980], [1000, 1.962]];
    for (const [df, t] of table) assert.ok(Math.abs(studentT95(df) - t) < 1e-3, `df ${df}: ${studentT95(df)} vs ${t}`);
    assert.throws(() => studentT95(0), RangeError);
  });
});

describe("interval95", () => {
  it("gives a rate Wilson's score interval, which stays inside [0, 1]", () => {
    const eight = wilson95(8, 10);
    assert.ok(Math.abs(eight.low - 0.4902) < 1e-4 && Math.abs(eight.high - 0.9433) < 1e-4, JSON.stringify(eight));
    const none = interval95(Array(10).fill(0));
    assert.equal(none.method, "wilson");
    assert.equal(none.low, 0);
    assert.ok(Math.abs(none.high - 0.2775) < 1e-4, JSON.stringify(none));
    // 64 games at a 0.63 win rate: about +-0.12, as the issue says
    const games = interval95([...Array(40).fill(1), ...Array(24).fill(0)]);
    assert.ok(games.high - games.low > 0.22 && games.high - games.low < 0.25, JSON.stringify(games));
  });
  it("gives any other mean Student's t interval", () => {
    const values = [0.1, 0.5, -0.2, 0.9, 0.3];
    const r = interval95(values);
    const mean = 0.32;
    const sd = Math.sqrt(values.reduce((a, v) => a + (v - mean) ** 2, 0) / 4);
    assert.equal(r.method, "t");
    assert.ok(Math.abs(r.mean - mean) < 1e-12);
    assert.ok(Math.abs(r.high - (mean + 2.776445105 * sd / Math.sqrt(5))) < 1e-9);
    assert.ok(Math.abs(r.low - (mean - 2.776445105 * sd / Math.sqrt(5))) < 1e-9);
  });
  it("refuses no values and non-finite ones", () => {
    assert.throws(() => interval95([]), /at least one value/);
    assert.throws(() => interval95([1, Number.NaN]), /finite/);
  });
});

describe("reportResults", () => {
  const evalOf = (label: string, wins: number, games: number): EvalResult => {
    const results = Array.from({ length: games }, (_, i) => new Trajectory({ reward: i < wins ? 1 : 0, metrics: { win: i < wins, moves: 3 } }));
    return Object.assign(summarize(label, results), { results });
  };
  const options = (dir: string, trainedWins: number) => ({
    notebook: "game", metric: "win", seed: 0, startedAt: Date.now() - 12_000, dir,
    untrained: evalOf("untrained model", 5, 64), trained: evalOf("trained (step 40)", trainedWins, 64),
    baselines: [evalOf("random player", 30, 64)],
  });

  it("writes the run's results, with the trained score's interval and the verdict against every baseline", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "art-results-"));
    const written = reportResults(options(dir, 56));
    const file = JSON.parse(fs.readFileSync(path.join(dir, "game.json"), "utf8"));
    assert.deepEqual(file, written);
    assert.equal(file.notebook, "game");
    assert.equal(file.metric, "win");
    assert.equal(file.evalGames, 64);
    assert.equal(file.untrained, 5 / 64);
    assert.equal(file.trained, 56 / 64);
    const wilson = wilson95(56, 64);
    assert.deepEqual(file.trainedInterval95, [wilson.low, wilson.high]);
    assert.deepEqual(file.baselines, { "random player": 30 / 64 });
    assert.equal(file.beatsEveryBaseline, true);
    assert.ok(file.wallSeconds >= 12 && file.wallSeconds < 60, String(file.wallSeconds));
    assert.match(file.machine, /\(\d+ cores(, [A-Z0-9-]+)?\)$/);
    assert.equal(file.seed, 0);
    assert.equal(file.smoke, false);
  });
  it("keeps a run with another seed beside the default seed's run", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "art-results-"));
    reportResults(options(dir, 56));
    reportResults({ ...options(dir, 50), seed: 1 });
    assert.equal(JSON.parse(fs.readFileSync(path.join(dir, "game.json"), "utf8")).trained, 56 / 64);
    assert.equal(JSON.parse(fs.readFileSync(path.join(dir, "game-seed1.json"), "utf8")).trained, 50 / 64);
  });
  it("lists references (a teacher, an oracle) beside the baselines, outside the verdict", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "art-results-"));
    const written = reportResults({ ...options(dir, 50), references: [evalOf("scripted teacher", 60, 64)] });
    assert.deepEqual(written.references, { "scripted teacher": 60 / 64 });
    assert.deepEqual(written.baselines, { "random player": 30 / 64 });
    assert.equal(written.beatsEveryBaseline, true, "a reference above the trained agent does not change the verdict");
    assert.equal(reportResults(options(dir, 50)).references, undefined, "no references, no field");
  });
  it("does not call a win within the interval a win", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "art-results-"));
    // 0.56 against 0.47: higher, but the interval's lower end (about 0.44) is not above 0.47
    assert.equal(reportResults(options(dir, 36)).beatsEveryBaseline, false);
  });
  it("averages the trajectories of one game before the interval, so a game's seats count once", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "art-results-"));
    const seats = (label: string, rewards: number[]): EvalResult => {
      const results = rewards.map((reward, i) => new Trajectory({ reward, metadata: { board: Math.floor(i / 2) } }));
      return Object.assign(summarize(label, results), { results });
    };
    const written = reportResults({ notebook: "board", metric: "reward", seed: 0, startedAt: Date.now(), dir,
      gameOf: (t) => t.metadata.board, untrained: seats("u", [0, 0, 0, 0]), trained: seats("t", [1, 0, 0.5, 0.5, 1, 1]),
      baselines: [seats("b", [0, 0, 0, 0, 0, 0])] });
    assert.equal(written.evalGames, 3);
    const games = [0.5, 0.5, 1];
    const sd = Math.sqrt(games.reduce((a, v) => a + (v - 2 / 3) ** 2, 0) / 2);
    assert.ok(Math.abs(written.trainedInterval95[0] - (2 / 3 - 4.30265273 * sd / Math.sqrt(3))) < 1e-9);
  });
  it("names the metric a trajectory lacks", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "art-results-"));
    assert.throws(() => reportResults({ ...options(dir, 40), metric: "score" }), /no numeric metric "score" \(its metrics: win, moves\)/);
  });
  it("writes a smoke run under .art/results, never over a full run's evidence", () => {
    const cwd = process.cwd();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "art-results-"));
    process.chdir(dir);
    try {
      const { dir: _, ...rest } = options("", 40);
      reportResults({ ...rest, smoke: true });
      assert.ok(fs.existsSync(path.join(dir, ".art", "results", "game.json")));
      assert.ok(!fs.existsSync(path.join(dir, "notebooks")));
    } finally {
      process.chdir(cwd);
    }
  });
});
