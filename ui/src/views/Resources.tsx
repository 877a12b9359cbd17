// What `agentplane up` is converging to: its Processes, Sessions and Sandboxes with
// their phase and conditions, the file each came from, and the files it could not
// take, kept current by its watch stream. A suspended sandbox says since when, and
// one that work may wake has a Wake button.
import type { FileError, ResourceList, ResourceView } from "@agentplane/sdk";
import { useEffect, useState } from "react";
import { useConnection } from "../context";
import { absoluteTime, elapsed, errorText, relativeTime, useNow } from "../format";
import { rowLink } from "../components/rowLink";
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
                <tr key={`${r.kind}/${r.namespace}/${r.name}`} {...rowLink(opens(r))}>
                  <td>
                    <ResourceName resource={r} />
                    {(r.reason || r.message) && (
                      <div className="muted small reason">
                        {r.reason}
                        {r.reason && r.message ? ": " : ""}
                        {r.message}
                      </div>
                    )}
                    <AttachHint resource={r} />
                  </td>
                  <td className="muted">{r.namespace}</td>
                  <td>
                    <Phase resource={r} />
                  </td>
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

/** Whether it runs on the node agent serving this page (`local`), where its ids open. */
function isHere(resource: ResourceView): boolean {
  return !resource.sandbox || resource.sandbox === "local";
}

/**
 * Whether its node-agent process or session exists yet: a Pending one (its env file
 * missing, its sandbox not ready) has an id that names nothing so far.
 */
function started(resource: ResourceView): boolean {
  return resource.phase !== "Pending";
}

/** Its id on its node agent, once it has started there. */
function nodeId(resource: ResourceView): string | undefined {
  const id = resource.kind === "Process" ? resource.processId : resource.kind === "Session" ? resource.sessionId : undefined;
  return id && started(resource) ? id : undefined;
}

/** The address that opens it in this page (its terminal or its conversation), if it can. */
export function opens(resource: ResourceView): string | undefined {
  const id = nodeId(resource);
  if (!id || !isHere(resource)) return undefined;
  return resource.kind === "Process" ? href("terminals", id) : href("sessions", id);
}

/** Its name first, then its id on its node agent (or why there is none yet). */
function ResourceName({ resource }: { resource: ResourceView }) {
  const target = opens(resource);
  const id = nodeId(resource);
  const what = resource.kind === "Process" ? "process" : "session";
  return (
    <>
      {target ? (
        <a href={target} className="mono name" title={`open ${what} ${id}`}>
          {resource.name}
        </a>
      ) : (
        <span className="mono name" title={id && !isHere(resource) ? `${id} on the node agent of sandbox ${resource.sandbox}` : undefined}>
          {resource.name}
        </span>
      )}
      {id ? (
        <div className="muted small mono resource-id">{id}</div>
      ) : (
        (resource.kind === "Process" || resource.kind === "Session") && <div className="muted small resource-id">not started</div>
      )}
    </>
  );
}

/**
 * A terminal of a Process on another sandbox: its ids are on that sandbox's node agent,
 * which this page holds no token for, so the command that attaches to it instead.
 */
function AttachHint({ resource }: { resource: ResourceView }) {
  if (resource.kind !== "Process" || isHere(resource) || !started(resource)) return null;
  const spec = (resource.spec ?? {}) as { tty?: unknown; stdin?: unknown };
  if (!spec.tty && !spec.stdin) return null;
  const namespace = resource.namespace && resource.namespace !== "default" ? ` -n ${resource.namespace}` : "";
  return (
    <div className="small attach-hint">
      Its terminal is on sandbox {resource.sandbox}'s node agent; attach with{" "}
      <code className="command-line">{`agentplane attach process/${resource.name}${namespace} --dir DIR`}</code> (DIR: the folder{" "}
      <code>agentplane up</code> watches).
    </div>
  );
}

/** A suspended Sandbox's hold on sleep: since when, and whether only its spec wakes it. */
function suspension(resource: ResourceView): { since: string | undefined; held: boolean } | undefined {
  if (resource.kind !== "Sandbox" || resource.phase !== "Suspended") return undefined;
  const status = (resource.status ?? {}) as { suspendedAt?: unknown };
  const spec = (resource.spec ?? {}) as { suspend?: unknown };
  return { since: typeof status.suspendedAt === "string" ? status.suspendedAt : undefined, held: spec.suspend === true };
}

/** The phase badge; a suspended sandbox adds for how long, and its Wake (or what holds it). */
function Phase({ resource }: { resource: ResourceView }) {
  if (!resource.phase) return <span className="muted">—</span>;
  const badge = <span className={`badge phase-${resource.phase.toLowerCase()}`}>{resource.phase}</span>;
  const suspended = suspension(resource);
  if (!suspended) return badge;
  return (
    <>
      {badge}
      {suspended.since && <SuspendedFor since={suspended.since} />}
      <div className="phase-action">
        {suspended.held ? (
          <span className="muted small" title="Only its file wakes it: set spec.suspend to false there">
            held by spec.suspend
          </span>
        ) : (
          <WakeButton resource={resource} />
        )}
      </div>
    </>
  );
}

/** For how long, counting by the second (the view's own clock ticks every 10 s). */
function SuspendedFor({ since }: { since: string }) {
  const now = useNow(1_000);
  return (
    <span className="muted small suspended-for" title={`suspended since ${absoluteTime(since)}`}>
      for {elapsed(since, now)}
    </span>
  );
}

/**
 * Wakes the sandbox as any client of its endpoint would. Once asked, it stays "Waking…":
 * the stream's next list shows the sandbox Starting, and this row's phase cell without it.
 */
function WakeButton({ resource }: { resource: ResourceView }) {
  const { wakeSandbox } = useConnection();
  const [waking, setWaking] = useState(false);
  const [said, setSaid] = useState<{ text: string; bad: boolean } | undefined>();
  if (!wakeSandbox) return null;
  const wake = async () => {
    setWaking(true);
    setSaid(undefined);
    try {
      const { woken } = await wakeSandbox(resource.namespace, resource.name);
      if (!woken) {
        // Awake already (or starting): the list is a moment behind.
        setWaking(false);
        setSaid({ text: "not suspended any more", bad: false });
      }
    } catch (err) {
      setWaking(false);
      setSaid({ text: errorText(err), bad: true });
    }
  };
  return (
    <>
      <button
        type="button"
        className="small-button"
        disabled={waking}
        title="Start its node agent again, as any client of its endpoint would"
        onClick={() => void wake()}
      >
        {waking ? "Waking…" : "Wake"}
      </button>
      {said && (
        <div className={`small ${said.bad ? "bad-text" : "muted"}`} role={said.bad ? "alert" : "status"}>
          {said.text}
        </div>
      )}
    </>
  );
}
