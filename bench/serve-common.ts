// What the serving benchmarks share: a server (or helper) process speaking one JSON line per answer,
// a round of requests at a fixed concurrency through the official `openai` client, its summary,
// and the memory and CPU a process tree uses (read from /proc).
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import type OpenAI from "openai";

export const ROOT = path.resolve(__dirname, "..");
export const PYTHON = path.join(ROOT, ".venv", "bin", "python");
export const MODEL_CACHE = process.env.ART_MODEL_CACHE ?? path.join(ROOT, ".art", "models");
export const SYSTEM = { role: "system" as const, content: "You play tic-tac-toe as X. Reply with one empty cell name, like B2." };
export const MESSAGES = [SYSTEM, { role: "user" as const, content: "A1 X  A3\nB1 O  B3\nC1 C2 C3\nYour move?" }];

export interface Round {
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

export interface EngineStats {
  steps?: number;
  tokens_generated?: number;
  prompts_prefilled?: number;
}

export const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** A child process that prints one JSON line per answer; `ask` writes a line and awaits the next answer. */
export function lineProcess(args: string[], env: NodeJS.ProcessEnv = process.env) {
  const child = spawn(PYTHON, args, { stdio: ["pipe", "pipe", "inherit"], env });
  const waiting: { resolve: (line: string) => void; reject: (error: Error) => void }[] = [];
  readline.createInterface({ input: child.stdout! }).on("line", (line) => line.startsWith("{") && waiting.shift()?.resolve(line));
  child.on("exit", (code) => waiting.splice(0).forEach((w) => w.reject(new Error(`${args.join(" ")} exited with ${code}`))));
  const next = () => new Promise<string>((resolve, reject) => waiting.push({ resolve, reject }));
  return { child, next, ask: (line: string) => { const answer = next(); child.stdin!.write(line + "\n"); return answer; } };
}

export interface ServerOptions {
  model: string;
  dtype: string;
  dataDir: string;
  /** More server flags (`--engine vllm`, `--vllm-args ...`). */
  args?: string[];
  env?: NodeJS.ProcessEnv;
}

/** The gpu-server as a user starts it; resolves when it prints its ready line. */
export async function startServer(options: ServerOptions) {
  const server = lineProcess(["-m", "art_server", "--base-model", options.model, "--port", "0", "--data-dir", options.dataDir,
    "--model-cache", MODEL_CACHE, "--log-level", "warning", "--dtype", options.dtype, ...(options.args ?? [])],
  { ...process.env, ...options.env });
  const ready = JSON.parse(await server.next()) as { url: string; token: string };
  const headers = { authorization: `Bearer ${ready.token}`, "content-type": "application/json" };
  const stats = async (): Promise<EngineStats> => (await (await fetch(`${ready.url}/v1/engine/stats`, { headers })).json()) as EngineStats;
  const post = async (route: string, body: unknown) => {
    const response = await fetch(`${ready.url}${route}`, { method: "POST", headers, body: JSON.stringify(body) });
    if (!response.ok) throw new Error(`${route}: ${response.status} ${await response.text()}`);
    return response.text();
  };
  return { ...ready, pid: server.child.pid!, stats, post, stop: () => server.child.kill("SIGTERM") };
}

/** `requests` chat requests, `concurrency` at a time, each with its own seed. */
export async function runRound(client: OpenAI, model: string, maxTokens: number, concurrency: number, requests: number,
  seedBase: number, stats?: () => Promise<EngineStats>): Promise<Round> {
  const before = stats ? await stats() : {};
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
        const r = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: maxTokens, seed: seedBase + i });
        tokens += r.usage?.completion_tokens ?? 0;
        latenciesMs.push(performance.now() - t0);
      } catch (error) {
        errorMessages.push(String(error));
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const wallSeconds = (performance.now() - started) / 1000;
  const after = stats ? await stats() : {};
  return { requests, errors: errorMessages.length, tokens, wallSeconds, tokensPerSecond: tokens / wallSeconds, latenciesMs,
    engineSteps: (after.steps ?? NaN) - (before.steps ?? NaN),
    engineTokens: (after.tokens_generated ?? NaN) - (before.tokens_generated ?? NaN),
    errorMessages: errorMessages.slice(0, 5) };
}

export function summarize(concurrency: number, rounds: Round[]) {
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

/** The process and everything it started (vLLM runs in its own session, still a descendant). */
function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch { /* exited meanwhile */ }
  }
  const out = [root];
  for (let i = 0; i < out.length; i++) out.push(...(children.get(out[i]!) ?? []));
  return out;
}

/** Resident memory (bytes) and CPU time (seconds, user + system) of a process tree, now. */
export function treeUsage(root: number): { rssBytes: number; cpuSeconds: number } {
  const tick = 100; // USER_HZ on Linux
  let rssBytes = 0;
  let cpuSeconds = 0;
  for (const pid of processTree(root)) {
    try {
      const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
      rssBytes += Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // fields from the 3rd on: utime is the 14th
      cpuSeconds += (Number(fields[11]) + Number(fields[12])) / tick;
    } catch { /* exited meanwhile */ }
  }
  return { rssBytes, cpuSeconds };
}
