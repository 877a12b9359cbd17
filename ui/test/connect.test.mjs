// Connecting: the form served at /ui/ by the node agent itself, with its token, and
// with a token it refuses.
import assert from "node:assert/strict";
import test from "node:test";

import { browserTest, connectWithToken, launchBrowser, openPage, screenshot, sessionsView, startPlane } from "./helpers.mjs";

browserTest(test, "connect: with the token: the Sessions view; a wrong token: the refused-token error", async (t) => {
  const plane = await startPlane(t);
  const browser = await launchBrowser(t);

  // The right token.
  const page = await openPage(t, `${plane.baseUrl}/ui/`, { browser });
  await screenshot(t, page, "connect-form");
  const { prefilled } = await connectWithToken(page, plane);
  t.diagnostic(`Endpoint was prefilled with ${JSON.stringify(prefilled)}`);
  await sessionsView(page);
  const nav = page.getByRole("navigation", { name: "Main" });
  for (const name of ["Sessions", "Terminals", "Agents", "Requests"]) {
    assert.equal(await nav.getByRole("link", { name, exact: true }).count(), 1, `the nav link "${name}"`);
  }
  assert.equal(await nav.getByRole("link", { name: "Sessions", exact: true }).getAttribute("aria-current"), "page");
  // The form is gone, and the token is in no URL the page shows.
  assert.equal(await page.getByLabel("Token", { exact: true }).count(), 0);
  assert.ok(!page.url().includes(plane.token), "the token is not in the address");
  await screenshot(t, page, "sessions-view");

  // A wrong token, in a tab of its own (the right one is kept per tab).
  const wrong = await openPage(t, `${plane.baseUrl}/ui/`, { browser });
  await connectWithToken(wrong, plane, { token: "not-the-token-0123456789" });
  const alert = wrong.getByRole("alert").filter({ hasText: /refused/i });
  await alert.waitFor({ timeout: 15_000 });
  const text = await alert.innerText();
  assert.match(text, /refused this token/i, `the error names the refused token: ${JSON.stringify(text)}`);
  assert.doesNotMatch(text, /not-the-token/, "the error does not repeat the token");
  // Still the form, not the Sessions view.
  await wrong.getByRole("button", { name: "Connect", exact: true }).waitFor();
  assert.equal(await wrong.getByRole("heading", { name: "Sessions", exact: true }).count(), 0);
  await screenshot(t, wrong, "refused-token");
});
