// Every HTTP call this page made, and each as a curl command to run again.
import { memo, useCallback, useState, useSyncExternalStore } from "react";
import { curlCommand, type RequestEntry, requestLog } from "../api/requestLog";
import { clockTime } from "../format";

async function copy(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Not a secure context, or no permission: the old way.
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}

export function Requests() {
  const entries = useSyncExternalStore(requestLog.subscribe, requestLog.getSnapshot);
  const [copied, setCopied] = useState<{ id: number; text: string; ok: boolean } | undefined>();
  const newestFirst = [...entries].reverse();
  const onCopy = useCallback(async (entry: RequestEntry) => {
    const text = curlCommand(entry);
    setCopied({ id: entry.id, text, ok: await copy(text) });
  }, []);
  return (
    <section aria-labelledby="requests-title">
      <header className="view-head">
        <h1 id="requests-title">Requests</h1>
        <span className="muted small">{entries.length} kept (the newest 500)</span>
        <div className="spacer" />
        <button type="button" onClick={() => requestLog.clear()} disabled={entries.length === 0}>
          Clear
        </button>
      </header>
      {copied && (
        <div className="panel" role="status">
          <div className="small">
            {copied.ok ? "Copied to the clipboard" : "Could not copy: select it below"} (needs <code>AGENTPLANE_TOKEN</code> set in the shell):
          </div>
          <pre className="code curl" aria-label="curl command">
            {copied.text}
          </pre>
        </div>
      )}
      {entries.length === 0 ? (
        <p className="muted pad">No requests yet.</p>
      ) : (
        <div className="table-wrap">
          <table className="grid requests">
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Method</th>
                <th scope="col">Path</th>
                <th scope="col" className="num">Status</th>
                <th scope="col" className="num">Duration</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {newestFirst.map((entry) => (
                <RequestRow key={entry.id} entry={entry} onCopy={onCopy} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

/** Entries are immutable: a row renders again only when its entry was replaced. */
const RequestRow = memo(function RequestRow({ entry, onCopy }: { entry: RequestEntry; onCopy: (entry: RequestEntry) => void }) {
  const status =
    entry.status !== undefined ? (
      <span className={entry.status >= 400 ? "bad-text" : "ok-text"}>{entry.status}</span>
    ) : entry.error ? (
      <span className="bad-text" title={entry.error}>
        {entry.error === "aborted" ? "aborted" : "failed"}
      </span>
    ) : (
      <span className="muted">…</span>
    );
  return (
    <tr>
      <td className="mono small" title={new Date(entry.startedAt).toISOString()}>
        {clockTime(entry.startedAt)}
      </td>
      <td className="mono">{entry.method}</td>
      <td className="mono path" title={entry.url}>
        {entry.path}
        {entry.stream && <span className="tag">stream</span>}
      </td>
      <td className="num mono">{status}</td>
      <td className="num mono">{entry.durationMs !== undefined ? `${entry.durationMs} ms` : ""}</td>
      <td>
        <button type="button" className="small-button" onClick={() => onCopy(entry)}>
          Copy as curl
        </button>
      </td>
    </tr>
  );
});
