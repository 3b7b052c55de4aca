// Paths and names shared by the project's scripts (setup, start, test).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const VENV = path.join(ROOT, ".venv");
export const VENV_BIN = path.join(VENV, process.platform === "win32" ? "Scripts" : "bin");
export const VENV_PYTHON = path.join(VENV_BIN, process.platform === "win32" ? "python.exe" : "python");
/** vLLM's CPU build, in a venv of its own (it pins another transformers than the server's). */
export const VLLM_VENV = path.join(ROOT, ".venv-vllm");
export const VLLM_PYTHON = path.join(VLLM_VENV, process.platform === "win32" ? "Scripts" : "bin", process.platform === "win32" ? "python.exe" : "python");
export const KERNEL_NAME = "art-typescript";
export const KERNEL_DISPLAY_NAME = "TypeScript (art-ts)";
export const KERNEL_DIR = path.join(VENV, "share", "jupyter", "kernels", KERNEL_NAME);
/** Where tests and benchmarks put what they produce (executed notebooks, screenshots, raw data). */
export const ARTIFACTS = path.join(ROOT, ".artifacts");

/** Environment for child processes that should use the project's virtual environment. */
export function venvEnv(extra = {}) {
  return {
    ...process.env,
    VIRTUAL_ENV: VENV,
    PATH: `${VENV_BIN}${path.delimiter}${process.env.PATH ?? ""}`,
    // Jupyter must find the project's kernel in the venv, not in a user's global registry only.
    JUPYTER_PATH: [path.join(VENV, "share", "jupyter"), process.env.JUPYTER_PATH].filter(Boolean).join(path.delimiter),
    ...extra,
  };
}

/** Debian's chromium (or ART_CHROMIUM): npm cannot download a browser build on this kind of machine. */
export function findChromium() {
  const candidates = [process.env.ART_CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"];
  return candidates.find((c) => c && fs.existsSync(c)) ?? null;
}
