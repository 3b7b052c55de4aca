// Shared by the TypeScript tests: project paths and a headless Chromium launch, taken from the
// scripts' own module (scripts/project.mjs) so tests and set-up agree on both.
import { spawn } from "node:child_process";
import path from "node:path";
import readline from "node:readline";
import type { Browser, BrowserType } from "playwright-core";

interface ProjectModule {
  ROOT: string;
  VENV_BIN: string;
  ARTIFACTS: string;
  findChromium(): string | null;
}
// Node >= 20.19 can require() an ES module without top-level await.
const project = require("../../../scripts/project.mjs") as ProjectModule;

export const { ROOT, VENV_BIN, ARTIFACTS } = project;

/** scripts/html-export.mjs: a notebook as a standalone HTML page whose charts draw offline. */
export const { exportHtml } = require("../../../scripts/html-export.mjs") as {
  exportHtml(notebook: string, outDir: string, options?: { execute?: boolean; env?: Record<string, string> }): string;
};

/** The fast tier (`npm run test:fast`, *.fast.test.ts) starts no browser and no JupyterLab. */
function notInTheFastTier(what: string): void {
  if (process.env.ART_TEST_TIER === "fast") throw new Error(`a test of the fast tier (*.fast.test.ts) started ${what}: rename its file to *.test.ts`);
}

/** Debian's chromium (or ART_CHROMIUM); setup installs it for `npm test`. */
export function chromiumPath(): string {
  notInTheFastTier("a browser");
  const found = project.findChromium();
  if (!found) throw new Error("chromium not found: run `node scripts/setup.mjs --browser` or set ART_CHROMIUM");
  return found;
}

/** Headless Chromium with the flags this offline machine needs (playwright gives it a fresh profile). */
export async function launchChromium(type: BrowserType): Promise<Browser> {
  return type.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
}

/** JupyterLab started by `npm start`'s own command (scripts/start-lab.mjs), once it is ready. */
export interface RunningLab {
  url: string;
  token: string;
  stop(): void;
}

/** Starts scripts/start-lab.mjs with `args` (and extra environment) and waits for its ready line. */
export async function startLab(args: string[], env: Record<string, string> = {}): Promise<RunningLab> {
  notInTheFastTier("JupyterLab");
  const lab = spawn(process.execPath, [path.join(ROOT, "scripts", "start-lab.mjs"), ...args], {
    cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env },
  });
  let stderr = "";
  lab.stderr.on("data", (c) => (stderr += c));
  try {
    const ready = await new Promise<{ url: string; token: string }>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`JupyterLab did not start in 60 s:\n${stderr}`)), 60_000);
      readline.createInterface({ input: lab.stdout }).on("line", (line) => {
        if (line.startsWith("{")) {
          clearTimeout(timer);
          resolve(JSON.parse(line));
        }
      });
      lab.on("exit", (code) => reject(new Error(`JupyterLab exited with ${code}:\n${stderr}`)));
    });
    return { ...ready, stop: () => lab.kill("SIGTERM") };
  } catch (error) {
    lab.kill("SIGTERM");
    throw error;
  }
}

/** What {@link run} gives back. */
export interface Ran {
  exitCode: number | null;
  stdout: string;
  /** stdout and stderr interleaved. */
  all: string;
}

/** Runs a command to its end; `all` is stdout and stderr interleaved. */
export function run(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; timeout?: number } = {}): Promise<Ran> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"], timeout: options.timeout ?? 300_000 });
    let stdout = "";
    let all = "";
    child.stdout.on("data", (chunk) => { stdout += chunk; all += chunk; });
    child.stderr.on("data", (chunk) => { all += chunk; });
    child.on("error", (error) => { all += String(error); });
    child.on("close", (exitCode) => resolve({ exitCode, stdout, all }));
  });
}
