#!/usr/bin/env node
// Starts JupyterLab from .venv on 127.0.0.1 with notebooks/ as its root and the project kernel
// available, then prints the URL with its token. `npm start` runs setup first, then this.
//
//   node scripts/start-lab.mjs [--port 8888] [--token TOKEN] [--root notebooks] [--ip 127.0.0.1]
//
// Environment: ART_LAB_PORT, ART_LAB_TOKEN, ART_LAB_IP. Port 0 picks a free port.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { parseArgs } from "node:util";
import { ROOT, VENV_BIN, venvEnv } from "./project.mjs";

const { values } = parseArgs({
  options: {
    port: { type: "string", default: process.env.ART_LAB_PORT ?? "8888" },
    token: { type: "string", default: process.env.ART_LAB_TOKEN ?? randomBytes(24).toString("hex") },
    root: { type: "string", default: "notebooks" },
    ip: { type: "string", default: process.env.ART_LAB_IP ?? "127.0.0.1" },
  },
});

const args = [
  "lab",
  "--no-browser",
  `--ip=${values.ip}`,
  `--port=${values.port}`,
  `--ServerApp.root_dir=${path.resolve(ROOT, values.root)}`,
  `--IdentityProvider.token=${values.token}`,
  // The kernel is registered in .venv; the venv's Python kernel (which ships with Jupyter) is not
  // offered at all, so Lab's kernel chooser, when it asks, can only preselect TypeScript (art-ts).
  "--MappingKernelManager.default_kernel_name=art-typescript",
  "--KernelSpecManager.allowed_kernelspecs=art-typescript",
  // No "get notified about Jupyter news?" pop-up over the outputs (and no request to the internet).
  "--LabApp.news_url=None",
  "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
];
if (process.getuid?.() === 0) args.push("--allow-root");

const lab = spawn(path.join(VENV_BIN, "jupyter"), args, { cwd: ROOT, env: venvEnv(), stdio: ["inherit", "inherit", "pipe"] });
let announced = false;
lab.stderr.on("data", (chunk) => {
  process.stderr.write(chunk);
  const match = !announced && String(chunk).match(/(http:\/\/[^\s/]+:\d+)\/lab\?token=/);
  if (match) {
    announced = true;
    // One machine-readable line for scripts and tests, then the URL for people.
    console.log(JSON.stringify({ event: "ready", url: match[1], token: values.token }));
    console.log(`\nJupyterLab is running: ${match[1]}/lab?token=${values.token}\nOpen a notebook from notebooks/, pick the kernel "TypeScript (art-ts)" if asked, and run all cells.\n`);
  }
});
lab.on("error", (error) => {
  console.error(`could not start JupyterLab (${error.message}); run npm run setup`);
  process.exit(1);
});
lab.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => lab.kill(signal));
