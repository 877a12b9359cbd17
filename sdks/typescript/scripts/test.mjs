// `npm test`: checks that the committed build (dist/) is what the sources compile to,
// compiles the TypeScript tests, type-checks the examples and the package's types
// without the DOM lib, checks the packed size, then runs every test with Node's own
// runner against the real `agentplane` binary ($AGENTPLANE_BIN, else the workspace's
// target/debug/agentplane).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const MAX_PACKED_BYTES = 60 * 1024;

const tsc = join(root, "node_modules/typescript/bin/tsc");

// dist/ is committed, so that a folder install (`npm install path/to/sdks/typescript`)
// works as it is, offline and with no install script: it must be what the sources
// compile to now.
const fresh = mkdtempSync(join(tmpdir(), "agentplane-sdk-dist-"));
let stale;
try {
  execFileSync(process.execPath, [tsc, "-p", "tsconfig.json", "--outDir", fresh], { cwd: root, stdio: "inherit" });
  stale = differences(join(root, "dist"), fresh);
} finally {
  rmSync(fresh, { recursive: true, force: true });
}
if (stale.length > 0) {
  console.error(`dist/ is not what the sources compile to (${stale.join(", ")}): run \`npm run build\` and commit dist/`);
  process.exit(1);
}
for (const project of ["tsconfig.test.json", "tsconfig.examples.json", "test/node-only/tsconfig.json"]) {
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

/** The files that differ between two trees, or are in only one of them. */
function differences(a, b) {
  const files = (dir) =>
    existsSync(dir) ? readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => relative(dir, join(e.parentPath, e.name))) : [];
  const names = [...new Set([...files(a), ...files(b)])].sort();
  return names.filter((name) => {
    const [left, right] = [join(a, name), join(b, name)];
    return !existsSync(left) || !existsSync(right) || !readFileSync(left).equals(readFileSync(right));
  });
}
