// Serving benchmark: starts the gpu-server on the default base model (SmolLM2-135M-Instruct; or
// --model builtin:tiny) and drives it with the official `openai` client at concurrency 1, 8 and 32;
// measures generated tokens/s, p50/p95 latency and errors, and the server's overhead against the
// engine called directly (bench/serve_engine_direct.py). Then a group's rollouts: 8 requests that
// share one prompt against 8 with different prompts of the same length, arriving together (the
// shared prompt is prefilled once). Prints tables and writes raw data to .artifacts/bench/serve.json.
//
// A shared 2-core machine drifts by ±20% over tens of seconds, so nothing is measured in one block:
// the levels take turns, round after round, and each level's tokens/s is its median round; the
// overhead alternates blocks of HTTP requests with blocks of the same requests on the engine alone.
//
//   npm run bench:serve [-- --rounds 3 --requests-per-level 192 --max-tokens 16 --levels 1,8,32 --dtype auto|float32|bfloat16]
//   npm run bench:serve -- --model builtin:tiny --levels 1,8,64,256 --requests-per-level 768 --rounds 5
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { parseArgs } from "node:util";
import OpenAI from "openai";

const ROOT = path.resolve(__dirname, "..");
const PYTHON = path.join(ROOT, ".venv", "bin", "python");
const { values } = parseArgs({
  options: {
    "requests-per-level": { type: "string", default: "192" },
    "max-tokens": { type: "string", default: "16" },
    levels: { type: "string", default: "1,8,32" },
    rounds: { type: "string", default: "3" },
    model: { type: "string", default: "HuggingFaceTB/SmolLM2-135M-Instruct" },
    dtype: { type: "string", default: "auto" },
  },
});
const MAX_TOKENS = Number(values["max-tokens"]);
const LEVELS = values.levels.split(",").map(Number);
const ROUNDS = Number(values.rounds);
const SYSTEM = { role: "system" as const, content: "You play tic-tac-toe as X. Reply with one empty cell name, like B2." };
const MESSAGES = [SYSTEM, { role: "user" as const, content: "A1 X  A3\nB1 O  B3\nC1 C2 C3\nYour move?" }];
const MODEL_CACHE = process.env.ART_MODEL_CACHE ?? path.join(__dirname, "..", ".art", "models");

interface Round {
  requests: number;
  errors: number;
  tokens: number;
  wallSeconds: number;
  tokensPerSecond: number;
  latenciesMs: number[];
  engineSteps: number;
  engineTokens: number;
  errorMessages: string[];
}

interface EngineStats {
  steps: number;
  tokens_generated: number;
  prompts_prefilled: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** A child process that prints one JSON line per answer; `ask` writes a line and awaits the next answer. */
function lineProcess(args: string[]) {
  const child = spawn(PYTHON, args, { stdio: ["pipe", "pipe", "inherit"] });
  const waiting: { resolve: (line: string) => void; reject: (error: Error) => void }[] = [];
  readline.createInterface({ input: child.stdout! }).on("line", (line) => line.startsWith("{") && waiting.shift()?.resolve(line));
  child.on("exit", (code) => waiting.splice(0).forEach((w) => w.reject(new Error(`${args.join(" ")} exited with ${code}`))));
  const next = () => new Promise<string>((resolve, reject) => waiting.push({ resolve, reject }));
  return { child, next, ask: (line: string) => { const answer = next(); child.stdin!.write(line + "\n"); return answer; } };
}

async function startServer(dataDir: string) {
  const server = lineProcess(["-m", "art_server", "--base-model", values.model, "--port", "0", "--data-dir", dataDir,
    "--model-cache", MODEL_CACHE, "--log-level", "warning", "--dtype", values.dtype]);
  const ready = JSON.parse(await server.next()) as { url: string; token: string };
  const stats = async (): Promise<EngineStats> =>
    (await (await fetch(`${ready.url}/v1/engine/stats`, { headers: { authorization: `Bearer ${ready.token}` } })).json()) as EngineStats;
  return { ...ready, stats, stop: () => server.child.kill("SIGTERM") };
}

async function runRound(client: OpenAI, concurrency: number, requests: number, seedBase: number,
  stats: () => Promise<EngineStats>): Promise<Round> {
  const before = await stats();
  const latenciesMs: number[] = [];
  const errorMessages: string[] = [];
  let tokens = 0;
  let next = 0;
  const started = performance.now();
  async function worker() {
    while (next < requests) {
      const i = next++;
      const t0 = performance.now();
      try {
        const r = await client.chat.completions.create({ model: values.model, messages: MESSAGES, max_tokens: MAX_TOKENS, seed: seedBase + i });
        tokens += r.usage?.completion_tokens ?? 0;
        latenciesMs.push(performance.now() - t0);
      } catch (error) {
        errorMessages.push(String(error));
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const wallSeconds = (performance.now() - started) / 1000;
  const after = await stats();
  return { requests, errors: errorMessages.length, tokens, wallSeconds, tokensPerSecond: tokens / wallSeconds, latenciesMs,
    engineSteps: after.steps - before.steps, engineTokens: after.tokens_generated - before.tokens_generated,
    errorMessages: errorMessages.slice(0, 5) };
}

function summarize(concurrency: number, rounds: Round[]) {
  const latencies = rounds.flatMap((r) => r.latenciesMs).sort((a, b) => a - b);
  const rates = rounds.map((r) => r.tokensPerSecond);
  const steps = rounds.reduce((s, r) => s + r.engineSteps, 0);
  return {
    concurrency, requests: rounds.reduce((s, r) => s + r.requests, 0), errors: rounds.reduce((s, r) => s + r.errors, 0),
    tokensPerSecond: median(rates), tokensPerSecondMin: Math.min(...rates), tokensPerSecondMax: Math.max(...rates),
    p50Ms: percentile(latencies, 50), p95Ms: percentile(latencies, 95),
    // Tokens sampled per forward pass (prefills and decode steps): how full the batches were.
    tokensPerEngineStep: rounds.reduce((s, r) => s + r.engineTokens, 0) / steps,
    errorMessages: rounds.flatMap((r) => r.errorMessages).slice(0, 5), rounds,
  };
}

async function main() {
  const outDir = path.join(ROOT, ".artifacts", "bench");
  fs.mkdirSync(outDir, { recursive: true });
  const dataDir = path.join(ROOT, ".artifacts", "bench", "data");
  const server = await startServer(dataDir);
  const direct = lineProcess([path.join(ROOT, "bench", "serve_engine_direct.py"), "--max-tokens", String(MAX_TOKENS),
    "--data-dir", dataDir, "--model-cache", MODEL_CACHE, "--model", values.model, "--dtype", values.dtype, "--messages", JSON.stringify(MESSAGES)]);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.token, maxRetries: 0, timeout: 120_000 });
  try {
    await direct.next(); // loaded and warmed up
    await runRound(client, 4, 16, 10_000, server.stats); // warm-up
    const rounds = new Map<number, Round[]>(LEVELS.map((level) => [level, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const level of round % 2 ? [...LEVELS].reverse() : LEVELS) {
        // Concurrency 1 is slow and steady: 30 requests a round measure it well.
        const requests = level === 1 ? 30 : Math.max(Math.ceil(Number(values["requests-per-level"]) / ROUNDS), 2 * level);
        rounds.get(level)!.push(await runRound(client, level, requests, round * 1000, server.stats));
      }
    }
    const results = LEVELS.map((level) => summarize(level, rounds.get(level)!));

    // Overhead at concurrency 1: blocks of the same seeded requests over HTTP and on the engine alone, alternating.
    const http: number[] = [];
    const httpTokens: number[] = [];
    const engine: number[] = [];
    const engineTokens: number[] = [];
    for (let block = 0; block < ROUNDS * 2; block++) {
      const seeds = Array.from({ length: 10 }, (_, i) => block * 10 + i);
      for (const seed of seeds) {
        const t0 = performance.now();
        const r = await client.chat.completions.create({ model: values.model, messages: MESSAGES, max_tokens: MAX_TOKENS, seed });
        http.push((performance.now() - t0) / 1000);
        httpTokens.push(r.usage?.completion_tokens ?? 0);
      }
      const answer = JSON.parse(await direct.ask(`${seeds[0]} ${seeds.length}`)) as { times_s: number[]; tokens: number[] };
      engine.push(...answer.times_s);
      engineTokens.push(...answer.tokens);
    }
    const sameTokens = engineTokens.every((t, i) => t === httpTokens[i]);

    // A group's rollouts: 8 requests at once that share a prompt (GRPO's case) against 8 whose
    // prompts differ (same length), alternating; the server prefills a shared prompt once.
    const groupTimes: Record<"shared" | "distinct", number[]> = { shared: [], distinct: [] };
    const prefilled: Record<"shared" | "distinct", number[]> = { shared: [], distinct: [] };
    for (let block = 0; block < ROUNDS * 2; block++) {
      for (const kind of ["shared", "distinct"] as const) {
        const before = await server.stats();
        const t0 = performance.now();
        await Promise.all(Array.from({ length: 8 }, (_, i) => client.chat.completions.create({
          model: values.model, max_tokens: MAX_TOKENS, seed: block * 100 + i,
          messages: [SYSTEM, { role: "user", content: `A1 X  A3\nB1 O  B3\nC1 C2 C3\nYour move, ${kind === "shared" ? "player" : `play${String.fromCharCode(97 + i)}r`}?` }],
        })));
        groupTimes[kind].push((performance.now() - t0) / 1000);
        prefilled[kind].push((await server.stats()).prompts_prefilled - before.prompts_prefilled);
      }
    }
    const overhead = (median(http) - median(engine)) / median(http);

    const base = results.find((r) => r.concurrency === 1)?.tokensPerSecond ?? NaN;
    console.log(`\nServing benchmark: ${values.model}, dtype ${values.dtype}, max_tokens ${MAX_TOKENS}, openai client over HTTP, ${ROUNDS} interleaved rounds\n`);
    console.log("| concurrency | requests | errors | tokens/s (median round) | range over rounds | x vs c=1 | p50 ms | p95 ms | tokens/engine step |");
    console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const r of results) {
      console.log(`| ${r.concurrency} | ${r.requests} | ${r.errors} | ${r.tokensPerSecond.toFixed(0)} | ` +
        `${r.tokensPerSecondMin.toFixed(0)}–${r.tokensPerSecondMax.toFixed(0)} | ${(r.tokensPerSecond / base).toFixed(1)} | ` +
        `${r.p50Ms.toFixed(1)} | ${r.p95Ms.toFixed(1)} | ${r.tokensPerEngineStep.toFixed(1)} |`);
    }
    for (const r of results.filter((r) => r.errorMessages.length)) console.log(`errors at ${r.concurrency}: ${r.errorMessages.join("; ")}`);
    console.log(`\nconcurrency 1, ${http.length} seeded requests in alternating blocks: HTTP median ${(median(http) * 1000).toFixed(2)} ms, ` +
      `engine direct median ${(median(engine) * 1000).toFixed(2)} ms -> server overhead ${(overhead * 100).toFixed(1)}%` +
      ` (same tokens generated: ${sameTokens})`);
    console.log(`\na group of 8 requests arriving together, max_tokens ${MAX_TOKENS}, ${ROUNDS * 2} alternating blocks: ` +
      `one shared prompt ${(median(groupTimes.shared) * 1000).toFixed(0)} ms (prompts prefilled: ${median(prefilled.shared)}), ` +
      `8 different prompts ${(median(groupTimes.distinct) * 1000).toFixed(0)} ms (prompts prefilled: ${median(prefilled.distinct)}) ` +
      `-> ${(median(groupTimes.distinct) / median(groupTimes.shared)).toFixed(2)}x`);
    const out = path.join(outDir, values.dtype === "auto" ? "serve.json" : `serve-${values.dtype}.json`);
    fs.writeFileSync(out, JSON.stringify({ model: values.model, dtype: values.dtype, maxTokens: MAX_TOKENS, rounds: ROUNDS, results,
      overhead: { http_s: http, httpTokens, engine_s: engine, engineTokens, overhead },
      group: { seconds: groupTimes, promptsPrefilled: prefilled } }, null, 2));
    console.log(`raw data: ${path.relative(ROOT, out)}`);
  } finally {
    server.stop();
    direct.child.stdin!.end();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
