// Agents through the SDK: the catalog, and a real install from the npm registry
// with its progress streamed.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { startPlane } from "./helpers.mjs";

test("list, get, modes and models describe what the node agent can drive", async (t) => {
  const plane = await startPlane(t);
  const agents = await plane.agents.list();
  assert.deepEqual(agents.map((a) => a.id).sort(), ["amp", "claude", "codex", "gemini", "mock", "opencode", "pi"]);
  const mock = await plane.agents.get("mock");
  assert.equal(mock.installed, true);
  assert.equal(mock.capabilities.permissions, true);
  const modes = await plane.agents.modes("claude");
  assert.ok(modes.permissionModes.includes("bypass"), JSON.stringify(modes));
  const models = await plane.agents.models("codex");
  assert.ok(Array.isArray(models.models));
  await assert.rejects(plane.agents.get("nonesuch"), { code: "unsupported_agent", status: 404 });
  await assert.rejects(plane.agents.install("mock"), { code: "invalid_request", status: 400 });
  await assert.rejects(plane.agents.install("amp", { version: "latest" }), { code: "invalid_request" });
});

test("install streams its progress, then the same version again is a no-op", async (t) => {
  // An agents directory of its own, so the install really happens (npm's cache in
  // ~/.npm keeps it quick after the first time on a machine).
  const agentsDir = mkdtempSync(join(tmpdir(), "sdk-agents-"));
  t.after(() => rmSync(agentsDir, { recursive: true, force: true }));
  const plane = await startPlane(t, { args: ["--agents-dir", agentsDir] });
  assert.equal((await plane.agents.get("amp")).installed, false);

  const progress = [];
  const result = await plane.agents.install("amp", {}, { onProgress: (p) => progress.push(p) });
  assert.equal(result.agent, "amp");
  assert.equal(result.alreadyInstalled, false);
  assert.ok(existsSync(result.path), `${result.path} is on disk`);
  assert.ok(result.path.startsWith(agentsDir));
  assert.match(result.integrity ?? "", /^sha512-/);
  assert.ok(progress.length >= 2, `progress arrived as it went: ${JSON.stringify(progress)}`);
  assert.ok(progress.every((p) => p.agent === "amp" && p.version === result.version));
  const phases = progress.map((p) => p.phase);
  assert.notEqual(phases[0], phases.at(-1), `the phases moved on: ${phases}`);

  const agent = await plane.agents.get("amp");
  assert.equal(agent.installed, true);
  assert.equal(agent.version, result.version);
  const again = await plane.agents.install("amp", { version: result.version });
  assert.equal(again.alreadyInstalled, true);
  assert.equal(again.path, result.path);
});
