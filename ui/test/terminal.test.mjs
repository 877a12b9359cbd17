// A shell in the page's xterm.js: keys typed into it, its size following the window,
// and the same screen after a reload, nothing repeated.
import assert from "node:assert/strict";
import test from "node:test";

import { browserTest, connectedPage, routeId, screenshot, startPlane, terminalLines, terminalSize, waitFor } from "./helpers.mjs";

const SIZE_LINE = /^(\d+) (\d+)$/;

browserTest(test, "terminal: keys into a shell, stty size after a resize, the same screen after a reload", async (t) => {
  const plane = await startPlane(t);
  const page = await connectedPage(t, plane);

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Terminals", exact: true }).click();
  await page.getByRole("button", { name: "New terminal", exact: true }).click();
  const processId = await routeId(page, "terminals");
  const info = await plane.processes.get(processId);
  assert.equal(info.pty, true, "a terminal, not pipes");

  // The shell's prompt, in the xterm.js the page exposes for tests.
  await waitFor("the shell's prompt in the page's terminal", async () => (await terminalLines(page, processId))?.length > 0);
  const lines = () => terminalLines(page, processId);
  const typeLine = async (text) => {
    await page.keyboard.type(text);
    await page.keyboard.press("Enter");
  };

  // Keys typed into the terminal, as a person would (a click to focus it first).
  await page.getByLabel("Terminal", { exact: true }).click();
  await typeLine("echo $((6*7))");
  await waitFor("42 on a line of its own", async () => (await lines()).includes("42"));
  await screenshot(t, page, "echo-42");

  // The size: as the node agent's terminal has it, then after the window shrinks.
  const sizesPrinted = async () => (await lines()).filter((line) => SIZE_LINE.test(line));
  const before = await terminalSize(page, processId);
  await typeLine("stty size");
  const [first] = await waitFor("stty size's answer", async () => {
    const found = await sizesPrinted();
    return found.length === 1 && found;
  });
  assert.equal(first, `${before.rows} ${before.cols}`, "stty size is the size of the page's terminal");

  await page.setViewportSize({ width: 900, height: 560 });
  const after = await waitFor("the page's terminal to fit the smaller window", async () => {
    const size = await terminalSize(page, processId);
    return size.rows !== before.rows && size.cols !== before.cols && size;
  });
  await typeLine("stty size");
  const [, second] = await waitFor("stty size's second answer", async () => {
    const found = await sizesPrinted();
    return found.length === 2 && found;
  });
  assert.equal(second, `${after.rows} ${after.cols}`, "stty size follows the page's terminal");
  assert.notEqual(second, first, "a different size after the resize");
  t.diagnostic(`stty size: ${first} at 1280×800, ${second} at 900×560`);
  await screenshot(t, page, "stty-size-after-resize");

  // What the screen holds once the shell is back at its prompt, before the reload.
  const settled = await waitFor("the prompt after the second stty size", async () => {
    const now = await lines();
    return now.at(-1) !== second && now.lastIndexOf(second) === now.length - 2 && now;
  });
  const offsetBefore = (await plane.processes.get(processId)).outputOffset;

  await page.reload();
  // The tab kept its token and its address: the same terminal comes back by itself.
  let restored;
  try {
    restored = await waitFor(
      "the same screen after the reload",
      async () => {
        restored = await lines();
        return JSON.stringify(restored) === JSON.stringify(settled) && restored;
      },
      15_000,
    );
  } catch (error) {
    assert.deepEqual(restored, settled, `the screen after the reload differs from the one before (${error.message})`);
  }
  assert.equal(restored.filter((line) => line === "42").length, 1, "the 42 line once: no output repeated");
  assert.equal((await plane.processes.get(processId)).outputOffset, offsetBefore, "the shell printed nothing more");
  assert.deepEqual(await terminalSize(page, processId), after, "the same size after the reload");
  await screenshot(t, page, "after-reload");

  // And it still takes keys.
  await page.getByLabel("Terminal", { exact: true }).click();
  await typeLine("echo again-$((6*7))");
  await waitFor("again-42 after the reload", async () => (await lines()).includes("again-42"));
});
