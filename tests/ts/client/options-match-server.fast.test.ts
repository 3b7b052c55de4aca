// Each training option is declared once per side: the zod schemas in lib/core/config.ts on the
// client, the pydantic models on the server (GRPOConfig, SFTConfig, LoraSpec, published in
// docs/openapi.json). This test keeps the two sides one contract: the same option names (camelCase
// here, snake_case on the wire), types, allowed values and bounds, and every default the TSDoc
// comments state equal to the server's.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { z } from "zod";
import { GrpoConfigSchema, LoraConfigSchema, SftConfigSchema } from "../../../lib/core/config";
import { snakeCase } from "../../../lib/core/options";
import { ROOT } from "../support/helpers";

type JsonSchema = {
  type?: string; enum?: unknown[]; anyOf?: JsonSchema[]; minimum?: number; maximum?: number; exclusiveMinimum?: number;
  exclusiveMaximum?: number; default?: unknown; items?: JsonSchema; minItems?: number; maxItems?: number; minLength?: number;
  maxLength?: number; properties?: Record<string, JsonSchema>;
};

const openapi = JSON.parse(fs.readFileSync(path.join(ROOT, "docs", "openapi.json"), "utf8")) as { components: { schemas: Record<string, JsonSchema> } };
const configSource = fs.readFileSync(path.join(ROOT, "lib", "core", "config.ts"), "utf8");

/** A property's own schema: without the `null` branch of an optional server field. */
function bare(schema: JsonSchema): JsonSchema {
  const options = schema.anyOf?.filter((s) => s.type !== "null");
  return options?.length === 1 ? { ...options[0], default: schema.default } : schema;
}

/** The facts both sides must agree on, with enum values in their wire form. */
function contract(schema: JsonSchema): Record<string, unknown> {
  const s = bare(schema);
  const facts: Record<string, unknown> = { type: s.type };
  if (s.enum) facts.enum = s.enum.map((v) => snakeCase(String(v))).sort();
  for (const key of ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems"] as const) {
    // zod states an integer's implied safe range; only bounds a side wrote count
    const bound = s[key];
    if (bound !== undefined && Math.abs(bound) < Number.MAX_SAFE_INTEGER) facts[key] = bound;
  }
  for (const key of ["minLength", "maxLength"] as const) if (s[key] !== undefined) facts[key] = s[key];
  if (s.items) facts.items = contract(s.items);
  return facts;
}

/** `(default X` in the TSDoc comment of `field` inside `interface name`, if it states one. */
function statedDefault(name: string, field: string): string | undefined {
  const body = configSource.slice(configSource.indexOf(`export interface ${name} {`));
  const block = body.slice(0, body.indexOf("\n}\n"));
  const match = new RegExp(`/\\*\\*((?:(?!\\*/)[\\s\\S])*)\\*/\\s*${field}\\?:`).exec(block);
  return match ? /\(default ([^;,:)\s]+)/.exec(match[1]!.replace(/\s*\*\s*/g, " "))?.[1] : undefined;
}

const PAIRS = [
  { client: "GrpoConfig", schema: GrpoConfigSchema, server: "GRPOConfig" },
  { client: "SftConfig", schema: SftConfigSchema, server: "SFTConfig" },
  { client: "LoraConfig", schema: LoraConfigSchema, server: "LoraSpec" },
] as const;

describe("the training options, client and server", () => {
  for (const { client, schema, server } of PAIRS) {
    it(`${client} (zod) and ${server} (pydantic) name the same options, with the same types, values and bounds`, () => {
      const ours = z.toJSONSchema(schema, { io: "input" }) as JsonSchema;
      const theirs = openapi.components.schemas[server];
      assert.ok(theirs?.properties, `${server} is not in docs/openapi.json`);
      const ourNames = Object.keys(ours.properties!).map(snakeCase).sort();
      assert.deepEqual(ourNames, Object.keys(theirs.properties).sort(), "option names");
      for (const [name, property] of Object.entries(ours.properties!)) {
        assert.deepEqual(contract(property), contract(theirs.properties[snakeCase(name)]!), `${client}.${name}`);
      }
    });

    it(`every default ${client}'s comments state is ${server}'s`, () => {
      const theirs = openapi.components.schemas[server]!.properties!;
      let stated = 0;
      for (const name of Object.keys(z.toJSONSchema(schema, { io: "input" }).properties ?? {})) {
        const text = statedDefault(client, name);
        if (text === undefined) continue;
        stated += 1;
        const server = theirs[snakeCase(name)]!.default;
        // A default that depends on other options (the server's is null) or a list is said in words.
        if (server === null || server === undefined || Array.isArray(server)) continue;
        const expected = typeof server === "string" ? `"${server}"` : String(server);
        const written = /^"/.test(text) ? `"${snakeCase(text.replace(/"/g, ""))}"` : String(Number(text) || text);
        assert.equal(written, expected, `${client}.${name}: the comment says default ${text}, the server's is ${JSON.stringify(server)}`);
      }
      assert.ok(stated > 0, `no default stated in ${client}'s comments`);
    });
  }
});
