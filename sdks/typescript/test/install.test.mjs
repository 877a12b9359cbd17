// The package as a user gets it, from the repository: packed (`npm pack`) and installed
// from the tarball, or installed from the folder itself, into a project of its own with
// no network (`--offline`: the package has no dependencies), and the READMEs' example
// run from there against the real binary.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, lstatSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { BINARY } from "./helpers.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const NPM_FLAGS = ["--offline", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error"];

/** A new project with nothing in it, removed after the test. */
function scratchProject(t, name) {
  const dir = mkdtempSync(join(tmpdir(), `agentplane-sdk-${name}-`));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: `scratch-${name}`, private: true, type: "module" }));
  return dir;
}

/** Runs the READMEs' example from `project`, where `@agentplane/sdk` is installed. */
function runQuickstart(project) {
  copyFileSync(join(root, "examples/quickstart.mjs"), join(project, "quickstart.mjs"));
  const env = { ...process.env, AGENTPLANE_BIN: BINARY };
  for (const key of ["AGENTPLANE_URL", "AGENTPLANE_TOKEN", "NODE_TEST_CONTEXT"]) delete env[key];
  const run = spawnSync(process.execPath, ["quickstart.mjs"], { cwd: project, env, encoding: "utf8", timeout: 60_000 });
  const said = `exit ${run.status ?? run.signal}\n--- stdout ---\n${run.stdout}\n--- stderr ---\n${run.stderr}`;
  assert.equal(run.status, 0, said);
  assert.match(run.stdout, /^mock reply #1 to: ask permission to run echo hi \(ran `echo hi`\)$/m, said);
}

test("npm pack of the folder, then npm install --offline of the tarball: the example runs from the installed package", (t) => {
  // The READMEs' commands, run in the user's project.
  const project = scratchProject(t, "from-tarball");
  const [pack] = JSON.parse(execFileSync(npm, ["pack", "--json", "--offline", root], { cwd: project, encoding: "utf8" }));
  for (const readme of ["README.md", "../../README.md"]) {
    assert.ok(readFileSync(join(root, readme), "utf8").includes(`npm install ./${pack.filename}`), `${readme} names ${pack.filename}`);
  }
  execFileSync(npm, ["install", ...NPM_FLAGS, `./${pack.filename}`], { cwd: project, stdio: ["ignore", "ignore", "inherit"] });
  // A copy, not a link to the repository.
  assert.ok(lstatSync(join(project, "node_modules/@agentplane/sdk")).isDirectory());
  assert.ok(lstatSync(join(project, "node_modules/@agentplane/sdk/dist/index.js")).isFile());
  runQuickstart(project);
});

test("npm install --offline of the folder: the example runs from the linked package", (t) => {
  const project = scratchProject(t, "from-folder");
  execFileSync(npm, ["install", ...NPM_FLAGS, root], { cwd: project, stdio: ["ignore", "ignore", "inherit"] });
  runQuickstart(project);
});
