// `npm test`: builds the package, compiles the TypeScript tests and type-checks the
// examples, checks the packed size, then runs every test with Node's own runner
// against the real `agentplane` binary ($AGENTPLANE_BIN, else the workspace's
// target/debug/agentplane).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MAX_PACKED_BYTES = 60 * 1024;

const tsc = join(root, "node_modules/typescript/bin/tsc");
for (const project of ["tsconfig.json", "tsconfig.test.json", "tsconfig.examples.json"]) {
  execFileSync(process.execPath, [tsc, "-p", project], { cwd: root, stdio: "inherit" });
}

// What `npm publish` would upload, and its size.
const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const [pack] = JSON.parse(execFileSync(npm, ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8" }));
console.log(`npm pack: ${pack.size} bytes packed (${pack.unpackedSize} unpacked, ${pack.entryCount} files)`);
if (pack.size >= MAX_PACKED_BYTES) {
  console.error(`the package is ${pack.size} bytes packed: past the ${MAX_PACKED_BYTES}-byte budget`);
  process.exit(1);
}
const leaked = pack.files.map((f) => f.path).filter((p) => !/^(dist\/.*\.(js|d\.ts)|README\.md|package\.json)$/.test(p));
if (leaked.length > 0) {
  console.error(`the package would ship files it should not: ${leaked.join(", ")}`);
  process.exit(1);
}

const files = [
  ...readdirSync(join(root, "test")).filter((f) => f.endsWith(".test.mjs")).map((f) => join("test", f)),
  ...readdirSync(join(root, "build/test")).filter((f) => f.endsWith(".test.js")).map((f) => join("build/test", f)),
].sort();
// Node 20 has WebSocket behind a flag; later versions have it by default.
const flags = typeof WebSocket === "undefined" ? ["--experimental-websocket"] : [];
if (!existsSync(process.env.AGENTPLANE_BIN ?? join(root, "../../target/debug/agentplane"))) {
  console.error("no agentplane binary: build it (cargo build -p agentplane) or set AGENTPLANE_BIN");
  process.exit(1);
}
const run = spawnSync(process.execPath, [...flags, "--test", ...files], { cwd: root, stdio: "inherit" });
process.exit(run.status ?? 1);
