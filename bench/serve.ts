// Serving benchmark: starts the gpu-server on builtin:tiny and drives it with the official
// `openai` client at concurrency 1, 8, 64 and 256; measures generated tokens/s, p50/p95 latency and
// errors, and the server's overhead against the engine called directly (bench/serve_engine_direct.py).
// Prints a table and writes raw data to .artifacts/bench/serve.json.
//
//   npm run bench:serve [-- --requests-per-level 768 --max-tokens 16 --levels 1,8,64,256]
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { parseArgs } from "node:util";
import OpenAI from "openai";

const ROOT = path.resolve(__dirname, "..");
const PYTHON = path.join(ROOT, ".venv", "bin", "python");
const { values } = parseArgs({
  options: {
    "requests-per-level": { type: "string", default: "768" },
    "max-tokens": { type: "string", default: "16" },
    levels: { type: "string", default: "1,8,64,256" },
    model: { type: "string", default: "builtin:tiny" },
  },
});
const MAX_TOKENS = Number(values["max-tokens"]);
const LEVELS = values.levels.split(",").map(Number);
const MESSAGES = [{ role: "user" as const, content: "Name an empty cell." }];

interface LevelResult {
  concurrency: number;
  requests: number;
  errors: number;
  tokens: number;
  wallSeconds: number;
  tokensPerSecond: number;
  p50Ms: number;
  p95Ms: number;
  errorMessages: string[];
}

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function startServer(dataDir: string): Promise<{ url: string; token: string; stop: () => void }> {
  const child = spawn(PYTHON, ["-m", "art_server", "--base-model", values.model, "--port", "0", "--data-dir", dataDir,
    "--log-level", "warning"], { stdio: ["ignore", "pipe", "inherit"] });
  const line = await new Promise<string>((resolve, reject) => {
    readline.createInterface({ input: child.stdout! }).on("line", (l) => l.startsWith("{") && resolve(l));
    child.on("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
  const ready = JSON.parse(line) as { url: string; token: string };
  return { ...ready, stop: () => child.kill("SIGTERM") };
}

async function runLevel(client: OpenAI, concurrency: number, requests: number, seedBase: number): Promise<LevelResult> {
  const latencies: number[] = [];
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
        latencies.push(performance.now() - t0);
      } catch (error) {
        errorMessages.push(String(error));
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const wallSeconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return { concurrency, requests, errors: errorMessages.length, tokens, wallSeconds, tokensPerSecond: tokens / wallSeconds,
    p50Ms: percentile(latencies, 50), p95Ms: percentile(latencies, 95), errorMessages: errorMessages.slice(0, 5) };
}

async function main() {
  const outDir = path.join(ROOT, ".artifacts", "bench");
  fs.mkdirSync(outDir, { recursive: true });
  const dataDir = path.join(ROOT, ".artifacts", "bench", "data");
  const server = await startServer(dataDir);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: server.token, maxRetries: 0, timeout: 120_000 });
  const results: LevelResult[] = [];
  try {
    await runLevel(client, 4, 16, 10_000); // warm-up
    for (const level of LEVELS) {
      // Concurrency 1 is slow and steady: 100 requests measure it well.
      const requests = level === 1 ? 100 : Math.max(Number(values["requests-per-level"]), level);
      results.push(await runLevel(client, level, requests, 0));
    }
    // Overhead at concurrency 1: the same seeded requests over HTTP and against the engine directly.
    const n = 50;
    const http: number[] = [];
    const httpTokens: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      const r = await client.chat.completions.create({ model: values.model, messages: MESSAGES, max_tokens: MAX_TOKENS, seed: i });
      http.push((performance.now() - t0) / 1000);
      httpTokens.push(r.usage?.completion_tokens ?? 0);
    }
    server.stop();
    const direct = JSON.parse(execFileSync(PYTHON, [path.join(ROOT, "bench", "serve_engine_direct.py"), "--requests", String(n),
      "--max-tokens", String(MAX_TOKENS), "--data-dir", dataDir, "--model", values.model], { encoding: "utf8" }).trim().split("\n").pop()!) as
      { times_s: number[]; tokens: number[] };
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const sameTokens = direct.tokens.every((t, i) => t === httpTokens[i]);
    const overhead = (median(http) - median(direct.times_s)) / median(http);

    const base = results.find((r) => r.concurrency === 1)?.tokensPerSecond ?? NaN;
    console.log(`\nServing benchmark: ${values.model}, max_tokens ${MAX_TOKENS}, openai client over HTTP\n`);
    console.log("| concurrency | requests | errors | tokens/s | x vs c=1 | p50 ms | p95 ms |");
    console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (const r of results) {
      console.log(`| ${r.concurrency} | ${r.requests} | ${r.errors} | ${r.tokensPerSecond.toFixed(0)} | ${(r.tokensPerSecond / base).toFixed(1)} | ${r.p50Ms.toFixed(1)} | ${r.p95Ms.toFixed(1)} |`);
    }
    console.log(`\nconcurrency 1, ${n} identical seeded requests: HTTP median ${(median(http) * 1000).toFixed(2)} ms, ` +
      `engine direct median ${(median(direct.times_s) * 1000).toFixed(2)} ms -> server overhead ${(overhead * 100).toFixed(1)}%` +
      ` (same tokens generated: ${sameTokens})`);
    const out = path.join(outDir, "serve.json");
    fs.writeFileSync(out, JSON.stringify({ model: values.model, maxTokens: MAX_TOKENS, results, overhead: { http_s: http, httpTokens, direct, overhead } }, null, 2));
    console.log(`raw data: ${path.relative(ROOT, out)}`);
  } finally {
    server.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
