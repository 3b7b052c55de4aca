#!/usr/bin/env node
// `npm run server -- [flags]`: the bundled gpu-server from .venv (set up first when needed).
// Flags are art-server's: --host, --port, --token, --data-dir, --base-model, --engine, --device, ...
// (`npm run server -- --help` lists them). Without --base-model (or ART_BASE_MODEL) it serves the
// default base model, SmolLM2-135M-Instruct; packaged models are converted into .art/models.
import { spawn, spawnSync } from "node:child_process";
import path from "node:path";
import { ROOT, VENV_PYTHON, venvEnv } from "./project.mjs";

const setup = spawnSync(process.execPath, [path.join(ROOT, "scripts", "setup.mjs"), "--quiet"], { stdio: "inherit" });
if (setup.status !== 0) process.exit(setup.status ?? 1);
const args = process.argv.slice(2);
const given = (flag) => args.some((a) => a === flag || a.startsWith(`${flag}=`));
if (!given("--base-model") && !process.env.ART_BASE_MODEL) args.push("--base-model", "HuggingFaceTB/SmolLM2-135M-Instruct");
if (!given("--model-cache") && !process.env.ART_MODEL_CACHE) args.push("--model-cache", path.join(ROOT, ".art", "models"));
const server = spawn(VENV_PYTHON, ["-m", "art_server", ...args], { stdio: "inherit", env: venvEnv() });
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => server.kill(signal));
server.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
