// The node agent's files through the SDK: a streamed write read back equal, ranges,
// listing and stat, mkdir/move/delete, a tar round trip, escapes refused with the
// server's problem, and a watch that sees changes in order.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { AgentPlane, AgentPlaneError } from "@agentplane/sdk";

import { BINARY } from "./helpers.mjs";

let root;
/** One node agent for the file, serving `root`. */
let plane;

before(async () => {
  root = await mkdtemp(join(tmpdir(), "agentplane-sdk-fs-"));
  plane = await AgentPlane.start({ binary: BINARY, args: ["--fs-root", root] });
});

after(async () => {
  await plane?.dispose();
  await rm(root, { recursive: true, force: true });
});

const sha = (bytes) => createHash("sha256").update(bytes).digest("hex");

test("a file written as a stream reads back equal, whole and by range", async () => {
  const { files } = plane;
  const bytes = randomBytes(3 * 1024 * 1024 + 17);
  // A ReadableStream body, sent as it is read.
  const chunks = [bytes.subarray(0, 1 << 20), bytes.subarray(1 << 20)];
  const body = new ReadableStream({
    pull(controller) {
      const next = chunks.shift();
      if (next) controller.enqueue(next);
      else controller.close();
    },
  });
  const written = await files.write("data/blob.bin", body, { parents: true, mode: 0o600 });
  assert.equal(written.type, "file");
  assert.equal(written.size, bytes.length);
  assert.equal(written.mode, 0o600);
  assert.equal(written.path, join(root, "data/blob.bin"));
  assert.equal(sha(await readFile(join(root, "data/blob.bin"))), sha(bytes));

  assert.equal(sha(await files.readBytes("data/blob.bin")), sha(bytes));
  assert.deepEqual(await files.readBytes("data/blob.bin", { range: { start: 10, end: 19 } }), new Uint8Array(bytes.subarray(10, 20)));
  assert.deepEqual(await files.readBytes("data/blob.bin", { range: { suffix: 5 } }), new Uint8Array(bytes.subarray(bytes.length - 5)));
  await assert.rejects(files.readBytes("data/blob.bin", { range: { start: bytes.length + 1 } }), (e) => e instanceof AgentPlaneError && e.status === 416);
});

test("list, stat, mkdir, move and delete", async () => {
  const { files } = plane;
  await files.mkdir("tree/a/b");
  await files.write("tree/a/note.txt", "hello\n");
  await symlink("note.txt", join(root, "tree/a/link"));
  const listing = await files.list("tree/a");
  assert.deepEqual(
    listing.entries.map((e) => [e.name, e.type]),
    [["b", "directory"], ["link", "symlink"], ["note.txt", "file"]],
  );
  assert.equal((await files.stat("tree/a/link")).target, "note.txt");
  assert.equal(await files.readText("tree/a/link"), "hello\n");

  await files.move("tree/a/note.txt", "tree/moved.txt");
  assert.equal(await files.readText("tree/moved.txt"), "hello\n");
  await assert.rejects(files.stat("tree/a/note.txt"), (e) => e instanceof AgentPlaneError && e.code === "not_found");
  await files.write("tree/other.txt", "other");
  await assert.rejects(files.move("tree/other.txt", "tree/moved.txt"), (e) => e instanceof AgentPlaneError && e.status === 409);
  await files.move("tree/other.txt", "tree/moved.txt", { overwrite: true });
  assert.equal(await files.readText("tree/moved.txt"), "other");

  await assert.rejects(files.delete("tree"), (e) => e instanceof AgentPlaneError && e.code === "directory_not_empty");
  await files.delete("tree", { recursive: true });
  await assert.rejects(files.stat("tree"), (e) => e instanceof AgentPlaneError && e.code === "not_found");
});

test("a tree goes up and comes back as tar, modes and symlinks kept", async (t) => {
  const { files } = plane;
  const source = await mkdtemp(join(tmpdir(), "agentplane-sdk-tar-"));
  t.after(() => rm(source, { recursive: true, force: true }));
  await writeFile(join(source, "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o755 });
  await writeFile(join(source, "secret"), "s", { mode: 0o600 });
  await symlink("run.sh", join(source, "link"));
  const tar = execFileSync("tar", ["-cf", "-", "-C", source, "."]);
  const result = await files.upload("unpacked", tar);
  assert.ok(result.entries >= 3, JSON.stringify(result));
  assert.equal((await files.stat("unpacked/run.sh")).mode, 0o755);
  assert.equal((await files.stat("unpacked/secret")).mode, 0o600);
  assert.equal((await files.stat("unpacked/link")).target, "run.sh");

  const back = Buffer.from(await new Response(await files.download("unpacked")).arrayBuffer());
  const listing = execFileSync("tar", ["-tvf", "-"], { input: back }).toString();
  assert.match(listing, /^-rwxr-xr-x .* (\.\/)?run\.sh$/m);
  assert.match(listing, /^-rw------- .* (\.\/)?secret$/m);
  assert.match(listing, /^lrwxrwxrwx .* (\.\/)?link -> run\.sh$/m);
});

test("paths that lead out are refused with the server's problem", async () => {
  const { files } = plane;
  for (const path of ["../outside", "/etc/passwd"]) {
    await assert.rejects(files.readText(path), (e) => e instanceof AgentPlaneError && e.code === "forbidden_path", path);
  }
  await symlink("/etc", join(root, "etc-link"));
  await assert.rejects(files.readText("etc-link/hostname"), (e) => e instanceof AgentPlaneError && e.code === "forbidden_path");
  await assert.rejects(files.write("etc-link/agentplane-was-here", "x"), (e) => e instanceof AgentPlaneError && e.code === "forbidden_path");
});

test("watch sees a write, a rewrite, a rename and a remove, in order, without the writes' temporary files", async () => {
  const { files } = plane;
  await files.mkdir("watched");
  const controller = new AbortController();
  const seen = [];
  const events = files.watch("watched", { signal: controller.signal });
  // The first change is made once the watch answers; until then, keep making it.
  const reader = (async () => {
    for await (const event of events) {
      seen.push([event.type, event.path.slice(root.length)]);
      if (event.type === "removed") break;
    }
  })();
  const started = (async () => {
    // A file created before the watch is in place is invisible to it; wait for the
    // first event by writing fresh names until one is seen.
    for (let i = 0; seen.length === 0; i++) {
      await files.write(`watched/probe-${i}`, "p");
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  await started;
  seen.length = 0;
  await files.write("watched/file.txt", "one");
  await files.write("watched/file.txt", "two");
  await files.move("watched/file.txt", "watched/renamed.txt");
  await files.delete("watched/renamed.txt");
  await reader;
  controller.abort();
  const kinds = seen.filter(([, path]) => !path.includes("probe")).map(([type, path]) => `${type} ${path}`);
  // The node agent's own temporary files (atomic writes) are not news: a write is a
  // create or a modify of the file written.
  assert.deepEqual(kinds, [
    "created /watched/file.txt",
    "modified /watched/file.txt",
    "renamed /watched/renamed.txt",
    "removed /watched/renamed.txt",
  ]);
});
