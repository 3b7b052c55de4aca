// `npm test`'s set-up on a machine that cannot run vLLM (ART_HARDWARE=no-avx512,no-cuda makes any
// machine one): it leaves vLLM out and says why, so the README's test command passes there; asked
// for vLLM by name (ART_EXTRAS=vllm), it fails with one line that says why and what to do.
import assert from "node:assert/strict";
import path from "node:path";
import { describe, it } from "node:test";
import { ROOT, run } from "../support/helpers";

const SETUP = path.join(ROOT, "scripts", "setup.mjs");
const NO_VLLM_HERE = "needs a Linux x86-64 CPU with AVX-512, or an NVIDIA GPU";

describe("set-up on a machine without AVX-512 or a GPU", { timeout: 120_000 }, () => {
  const env = (extra: Record<string, string>) => ({ ...process.env, ART_HARDWARE: "no-avx512,no-cuda", ...extra });

  it("leaves vLLM out for npm test (--vllm), says why, and succeeds", async () => {
    const result = await run(process.execPath, [SETUP, "--vllm"], { env: env({}) });
    assert.equal(result.exitCode, 0, result.all);
    assert.match(result.all, new RegExp(`\\[setup\\] vLLM left out \\(${NO_VLLM_HERE.replace(/[()]/g, "\\$&")}\\): its tests skip`));
  });

  it("fails with one line naming the step when vLLM is asked for by name (ART_EXTRAS=vllm)", async () => {
    const result = await run(process.execPath, [SETUP], { env: env({ ART_EXTRAS: "vllm" }) });
    assert.equal(result.exitCode, 1, result.all);
    assert.match(result.all, new RegExp(`\\[setup\\] FAILED at step "vllm": ART_EXTRAS=vllm: vLLM cannot run on this machine \\(it ${NO_VLLM_HERE}\\)`));
    assert.match(result.all, /\[setup\] fix: leave vllm out of ART_EXTRAS/);
  });

  it("refuses an ART_HARDWARE it does not know, saying what it takes", async () => {
    const result = await run(process.execPath, [SETUP, "--vllm"], { env: env({ ART_HARDWARE: "no-avx-512" }) });
    assert.equal(result.exitCode, 1, result.all);
    assert.match(result.all, /FAILED at step "hardware": ART_HARDWARE: 'no-avx-512' is not one of no-avx512, no-cuda, no-vllm/);
  });
});
