#!/usr/bin/env node
// `npm run server -- [flags]`: the bundled gpu-server from .venv (set up first when needed).
// Flags are art-server's: --host, --port, --token, --data-dir, --base-model, --engine, --device, ...
// (`npm run server -- --help` lists them).
import { spawn, spawnSync } from "node:child_process";
import path from "node:path";
import { ROOT, VENV_PYTHON, venvEnv } from "./project.mjs";

const setup = spawnSync(process.execPath, [path.join(ROOT, "scripts", "setup.mjs"), "--quiet"], { stdio: "inherit" });
if (setup.status !== 0) process.exit(setup.status ?? 1);
const server = spawn(VENV_PYTHON, ["-m", "art_server", ...process.argv.slice(2)], { stdio: "inherit", env: venvEnv() });
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => server.kill(signal));
server.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
