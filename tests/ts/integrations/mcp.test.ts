// McpTools against the repo's stdio MCP server (notebooks/mcp/towns-server.mjs, a real
// @modelcontextprotocol/sdk server in its own process): tools listed as OpenAI definitions, calls
// run as tool messages, and every kind of bad call answered as a message the model can read.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ConfigurationError, McpTools } from "../../../lib/index";
import { ROOT } from "../support/helpers";

const TOWNS_SERVER = path.join(ROOT, "notebooks", "mcp", "towns-server.mjs");

describe("McpTools over a stdio MCP server", () => {
  let mcp: McpTools;

  before(async () => {
    mcp = await McpTools.stdio({ command: process.execPath, args: [TOWNS_SERVER] });
  });
  after(async () => {
    await mcp?.close();
  });

  it("lists the server's tools as OpenAI tool definitions", () => {
    assert.deepEqual(mcp.names(), ["list_towns", "lookup_town"]);
    const lookup = mcp.definitions[1] as { type: string; function: { name: string; description: string; parameters: Record<string, any> } };
    assert.equal(lookup.type, "function");
    assert.equal(lookup.function.name, "lookup_town");
    assert.match(lookup.function.description, /population/);
    assert.equal(lookup.function.parameters.type, "object");
    assert.deepEqual(lookup.function.parameters.required, ["name"]);
    assert.equal(lookup.function.parameters.properties.name.type, "string");
  });

  it("calls tools, and reports a server-side error as an error result", async () => {
    const listed = await mcp.call("list_towns");
    assert.equal(listed.isError, false);
    assert.equal(listed.text.split(", ").length, 48);
    assert.deepEqual(await mcp.call("lookup_town", { name: "brindlemoor" }), { text: "Brindlemoor: population 41531, founded 1415.", isError: false });
    const missing = await mcp.call("lookup_town", { name: "Atlantis" });
    assert.equal(missing.isError, true);
    assert.match(missing.text, /No town named "Atlantis"/);
    const badArgs = await mcp.call("lookup_town", { town: 3 });
    assert.equal(badArgs.isError, true);
    const unknown = await mcp.call("weather", {});
    assert.deepEqual(unknown, { text: "Error: there is no tool named \"weather\"; the tools are list_towns, lookup_town", isError: true });
  });

  it("runs a completion's tool calls as tool messages, in order, bad arguments included", async () => {
    const messages = await mcp.run([
      { id: "c1", type: "function", function: { name: "lookup_town", arguments: '{"name": "Ashford"}' } },
      { id: "c2", type: "function", function: { name: "lookup_town", arguments: "{not json" } },
      { id: "c3", type: "function", function: { name: "list_towns", arguments: "" } },
    ]);
    assert.deepEqual(messages.map((m) => m.tool_call_id), ["c1", "c2", "c3"]);
    assert.match(String(messages[0]!.content), /^Ashford: population \d+, founded \d+\.$/);
    assert.match(String(messages[1]!.content), /arguments of lookup_town are not a JSON object/);
    assert.match(String(messages[2]!.content), /Brindlemoor, Brindleford/);
    assert.deepEqual(await mcp.run(undefined), []);
  });

  it("says what is wrong with its options, and when the server cannot be started", async () => {
    await assert.rejects(McpTools.stdio({ command: "" }), ConfigurationError);
    await assert.rejects(McpTools.stdio({ command: process.execPath, args: ["-e", "process.exit(3)"] }), /McpTools.stdio: could not start or reach/);
  });
});
