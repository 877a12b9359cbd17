// What `agentplane up` is converging to: its Processes, Sessions and Sandboxes with
// their phase and conditions, the file each came from, and the files it could not
// take, kept current by its watch stream.
import type { FileError, ResourceList, ResourceView } from "@agentplane/sdk";
import { useEffect, useState } from "react";
import { useConnection } from "../context";
import { absoluteTime, errorText, relativeTime, useNow } from "../format";
import { href } from "../router";

const GROUPS: [kind: string, title: string][] = [
  ["Process", "Processes"],
  ["Session", "Sessions"],
  ["Sandbox", "Sandboxes"],
];
/** Shown only when there are some. */
const MORE_GROUPS: [kind: string, title: string][] = [
  ["SandboxTemplate", "Sandbox templates"],
  ["SandboxWarmPool", "Warm pools"],
];

export function Resources() {
  const { resources } = useConnection();
  const [list, setList] = useState<ResourceList | undefined>();
  const [error, setError] = useState<string | undefined>();
  const [live, setLive] = useState(false);
  const now = useNow(10_000);

  useEffect(() => {
    if (!resources) return;
    const stop = new AbortController();
    void (async () => {
      try {
        setList(await resources.list(stop.signal));
        setLive(true);
        for await (const next of resources.watch({ signal: stop.signal })) {
          setList(next);
          setError(undefined);
        }
      } catch (err) {
        if (!stop.signal.aborted) setError(errorText(err));
      } finally {
        if (!stop.signal.aborted) setLive(false);
      }
    })();
    return () => stop.abort();
  }, [resources]);

  if (!resources) return <p className="pad">This node agent is not run by <code>agentplane up</code>: it has no resources.</p>;

  const known = new Set([...GROUPS, ...MORE_GROUPS].map(([kind]) => kind));
  const others = (list?.resources ?? []).filter((r) => !known.has(r.kind));
  const groups = [
    ...GROUPS,
    ...MORE_GROUPS.filter(([kind]) => list?.resources.some((r) => r.kind === kind)),
    ...(others.length > 0 ? ([["", "Other"]] as [string, string][]) : []),
  ];
  return (
    <section aria-labelledby="resources-title">
      <header className="view-head">
        <h1 id="resources-title">Resources</h1>
        <span className={`follow follow-${live ? "live" : "failed"}`}>{live ? "live" : "not following"}</span>
        {list && <span className="muted small">revision {String(list.revision)}</span>}
      </header>
      {error && (
        <p className="banner bad" role="alert">
          {error}
        </p>
      )}
      {list && list.fileErrors.length > 0 && (
        <div className="panel bad-panel" role="region" aria-label="Files not taken">
          <h2>Files not taken</h2>
          <ul className="file-errors">
            {list.fileErrors.map((e, i) => (
              <li key={i} className="mono">
                {fileErrorText(e)}
              </li>
            ))}
          </ul>
        </div>
      )}
      {list === undefined
        ? !error && <p className="muted pad">Loading…</p>
        : groups.map(([kind, title]) => (
            <ResourceTable
              key={title}
              title={title}
              items={kind ? list.resources.filter((r) => r.kind === kind) : others}
              now={now}
            />
          ))}
    </section>
  );
}

/** `file:line:column: message`, as a compiler says it (the place only when there is one). */
export function fileErrorText(e: FileError): string {
  const place = e.line ? (e.column ? `:${e.line}:${e.column}` : `:${e.line}`) : "";
  return `${e.file}${place}: ${e.message}`;
}

function ResourceTable({ title, items, now }: { title: string; items: ResourceView[]; now: number }) {
  return (
    <div className="resource-group">
      <h2>
        {title} <span className="muted small">{items.length}</span>
      </h2>
      {items.length === 0 ? (
        <p className="muted small pad-s">None.</p>
      ) : (
        <div className="table-wrap">
          <table className="grid" aria-label={title}>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Namespace</th>
                <th scope="col">Phase</th>
                <th scope="col">Conditions</th>
                <th scope="col">File</th>
                <th scope="col">Sandbox</th>
                <th scope="col">Updated</th>
              </tr>
            </thead>
            <tbody>
              {items.map((r) => (
                <tr key={`${r.kind}/${r.namespace}/${r.name}`}>
                  <td>
                    <ResourceName resource={r} />
                    {(r.reason || r.message) && (
                      <div className="muted small">
                        {r.reason}
                        {r.reason && r.message ? ": " : ""}
                        {r.message}
                      </div>
                    )}
                  </td>
                  <td className="muted">{r.namespace}</td>
                  <td>{r.phase ? <span className={`badge phase-${r.phase.toLowerCase()}`}>{r.phase}</span> : <span className="muted">—</span>}</td>
                  <td>
                    <div className="chips">
                      {r.conditions.map((c) => (
                        <span
                          key={c.type}
                          className={`chip ${c.status === "True" ? "on" : c.status === "False" ? "warn" : "off"}`}
                          title={[c.reason, c.message, c.lastTransitionTime && `since ${c.lastTransitionTime}`].filter(Boolean).join(" — ")}
                        >
                          {c.type}: {c.status}
                          {c.reason ? ` (${c.reason})` : ""}
                        </span>
                      ))}
                    </div>
                  </td>
                  <td className="mono small">{r.file ?? <span className="muted">made by the store</span>}</td>
                  <td className="mono small">{r.sandbox ?? ""}</td>
                  <td title={absoluteTime(r.updatedAt)}>{r.updatedAt ? relativeTime(r.updatedAt, now) : ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function ResourceName({ resource }: { resource: ResourceView }) {
  // Its ids are on its sandbox's node agent: only those of this one (`local`) open here.
  const here = !resource.sandbox || resource.sandbox === "local";
  if (!here && (resource.processId || resource.sessionId)) {
    return (
      <span className="mono" title={`${resource.processId ?? resource.sessionId} on the node agent of sandbox ${resource.sandbox}`}>
        {resource.name}
      </span>
    );
  }
  if (resource.kind === "Process" && resource.processId) {
    return (
      <a href={href("terminals", resource.processId)} className="mono" title={`open process ${resource.processId}`}>
        {resource.name}
      </a>
    );
  }
  if (resource.kind === "Session" && resource.sessionId) {
    return (
      <a href={href("sessions", resource.sessionId)} className="mono" title={`open session ${resource.sessionId}`}>
        {resource.name}
      </a>
    );
  }
  return <span className="mono">{resource.name}</span>;
}
