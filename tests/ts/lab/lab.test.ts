// `npm start`'s command: JupyterLab from .venv on 127.0.0.1, notebooks/ as its root, the project
// kernel registered with absolute paths, and a ready line with the URL and token.
import assert from "node:assert/strict";
import path from "node:path";
import { describe, it } from "node:test";
import { ROOT, startLab } from "../support/helpers";

interface KernelSpecs {
  default: string;
  kernelspecs: Record<string, { spec: { argv: string[]; display_name: string; language: string } }>;
}

describe("npm start (scripts/start-lab.mjs)", () => {
  it("serves JupyterLab on loopback with the project kernel and notebooks/ as root", async () => {
    const ready = await startLab(["--port", "0", "--token", "test-token"]);
    try {
      assert.match(ready.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const headers = { Authorization: `token ${ready.token}` };

      const unauthorized = await fetch(`${ready.url}/api/kernelspecs`);
      assert.equal(unauthorized.status, 403, "the API must require the token");

      const specs = (await (await fetch(`${ready.url}/api/kernelspecs`, { headers })).json()) as KernelSpecs;
      const kernel = specs.kernelspecs["art-typescript"];
      assert.ok(kernel, `project kernel missing from ${Object.keys(specs.kernelspecs).join(", ")}`);
      assert.equal(kernel.spec.display_name, "TypeScript (art-ts)");
      assert.equal(kernel.spec.language, "typescript");
      assert.ok(kernel.spec.argv.slice(0, 2).every((p) => path.isAbsolute(p)), `kernel argv not absolute: ${kernel.spec.argv}`);
      assert.equal(kernel.spec.argv[1], path.join(ROOT, "kernel", "launch.cjs"));
      assert.equal(specs.default, "art-typescript");
      // Only the project's kernel: a kernel chooser cannot preselect the venv's Python 3 (ipykernel).
      assert.deepEqual(Object.keys(specs.kernelspecs), ["art-typescript"]);

      const contents = (await (await fetch(`${ready.url}/api/contents`, { headers })).json()) as { content: Array<{ name: string }> };
      assert.ok(contents.content.some((e) => e.name === "README.md"), "the root is not notebooks/");
    } finally {
      ready.stop();
    }
  });
});
