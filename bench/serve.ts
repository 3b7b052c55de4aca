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
//   npm run bench:serve -- --engines hf,vllm    (the engines side by side: bench/serve-engines.ts)
//   npm run bench:serve -- --after-training     (the base model's decode on a fresh server vs one where models trained)
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { afterTraining } from "./serve-after-training";
import { compareEngines } from "./serve-engines";
import { MESSAGES, MODEL_CACHE, ROOT, SYSTEM, lineProcess, median, runRound, startServer, summarize, type Round } from "./serve-common";

const { values } = parseArgs({
  options: {
    "requests-per-level": { type: "string", default: "192" },
    "max-tokens": { type: "string", default: "16" },
    levels: { type: "string", default: "1,8,32" },
    rounds: { type: "string", default: "3" },
    model: { type: "string", default: "HuggingFaceTB/SmolLM2-135M-Instruct" },
    dtype: { type: "string", default: "auto" },
    engines: { type: "string" },
    "after-training": { type: "boolean", default: false },
  },
});
const MAX_TOKENS = Number(values["max-tokens"]);
const LEVELS = values.levels.split(",").map(Number);
const ROUNDS = Number(values.rounds);

async function main() {
  const outDir = path.join(ROOT, ".artifacts", "bench");
  fs.mkdirSync(outDir, { recursive: true });
  if (values.engines) {
    await compareEngines({ engines: values.engines.split(","), model: values.model, dtype: values.dtype, maxTokens: MAX_TOKENS,
      levels: LEVELS, rounds: ROUNDS, outDir });
    return;
  }
  if (values["after-training"]) {
    await afterTraining({ model: values.model, dtype: values.dtype, maxTokens: MAX_TOKENS, levels: LEVELS, rounds: ROUNDS, outDir });
    return;
  }
  const dataDir = path.join(ROOT, ".artifacts", "bench", "data");
  const server = await startServer({ model: values.model, dtype: values.dtype, dataDir });
  const direct = lineProcess([path.join(ROOT, "bench", "serve_engine_direct.py"), "--max-tokens", String(MAX_TOKENS),
    "--data-dir", dataDir, "--model-cache", MODEL_CACHE, "--model", values.model, "--dtype", values.dtype, "--messages", JSON.stringify(MESSAGES)]);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.token, maxRetries: 0, timeout: 120_000 });
  try {
    await direct.next(); // loaded and warmed up
    await runRound(client, values.model, MAX_TOKENS, 4, 16, 10_000, server.stats); // warm-up
    const rounds = new Map<number, Round[]>(LEVELS.map((level) => [level, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const level of round % 2 ? [...LEVELS].reverse() : LEVELS) {
        // Concurrency 1 is slow and steady: 30 requests a round measure it well.
        const requests = level === 1 ? 30 : Math.max(Math.ceil(Number(values["requests-per-level"]) / ROUNDS), 2 * level);
        rounds.get(level)!.push(await runRound(client, values.model, MAX_TOKENS, level, requests, round * 1000, server.stats));
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
        prefilled[kind].push((await server.stats()).prompts_prefilled! - before.prompts_prefilled!);
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
