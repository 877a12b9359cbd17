// The sessions of the node agent, and the form that starts one.
import type { AgentInfo, AgentModels, AgentModes, CreateSessionRequest, PermissionMode, ResourceView, SessionInfo } from "@agentplane/sdk";
import { useEffect, useRef, useState } from "react";
import { Field } from "../components/Field";
import { useConnection } from "../context";
import { absoluteTime, errorText, relativeTime, useNow } from "../format";
import { rowLink } from "../components/rowLink";
import { href, navigate } from "../router";

const POLL_MS = 3000;

export function StateBadge({ state }: { state: string }) {
  return <span className={`badge state-${state}`}>{state === "awaitingInput" ? "awaiting input" : state}</span>;
}

/** A declared Session's name as a person wrote it (`NAME`, or `NAMESPACE/NAME` outside `default`). */
function resourceName(r: ResourceView): string {
  return r.namespace && r.namespace !== "default" ? `${r.namespace}/${r.name}` : r.name;
}

export function SessionList() {
  const { plane, resources } = useConnection();
  const [sessions, setSessions] = useState<SessionInfo[] | undefined>();
  // Under `agentplane up`: its Session resources, which name the sessions it started
  // and list those it has not (Pending, with why).
  const [declared, setDeclared] = useState<ResourceView[]>([]);
  const [error, setError] = useState<string | undefined>();
  const [creating, setCreating] = useState(false);
  // The time of each session's newest event, fetched again only when its lastSequence moves.
  const activity = useRef(new Map<string, { sequence: number; time: string }>());
  const [, setActivityVersion] = useState(0);
  const now = useNow(5000);

  useEffect(() => {
    const stop = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const [list, resourceList] = await Promise.all([plane.sessions.list(stop.signal), resources?.list(stop.signal)]);
        setSessions(list);
        if (resourceList) setDeclared(resourceList.resources.filter((r) => r.kind === "Session"));
        setError(undefined);
        const stale = list.filter((s) => s.lastSequence > 0 && activity.current.get(s.id)?.sequence !== s.lastSequence);
        await Promise.all(
          stale.slice(0, 20).map(async (s) => {
            const page = await plane.sessions.readEvents(s.id, { offset: s.lastSequence - 1, limit: 1 }, stop.signal);
            const last = page.events.at(-1);
            if (last) activity.current.set(s.id, { sequence: s.lastSequence, time: last.time });
          }),
        );
        if (stale.length > 0) setActivityVersion((n) => n + 1);
      } catch (err) {
        if (stop.signal.aborted) return;
        setError(errorText(err));
      }
      if (!stop.signal.aborted) timer = setTimeout(() => void load(), document.hidden ? POLL_MS * 4 : POLL_MS);
    };
    void load();
    return () => {
      stop.abort();
      clearTimeout(timer);
    };
  }, [plane, resources]);

  const byId = new Map(declared.filter((r) => r.sessionId).map((r) => [r.sessionId, r]));
  const known = new Set((sessions ?? []).map((s) => s.id));
  // Declared but with no node-agent session yet (its env file missing, its sandbox not ready).
  const notStarted = declared.filter((r) => r.phase === "Pending" && !(r.sessionId && known.has(r.sessionId)));
  const nameOf = (s: SessionInfo): string | undefined => {
    const r = byId.get(s.id);
    return r ? resourceName(r) : (s.label ?? undefined);
  };
  const lastActivity = (s: SessionInfo) => activity.current.get(s.id)?.time ?? s.endedAt ?? s.createdAt;
  const sorted = [...(sessions ?? [])].sort((a, b) => Date.parse(lastActivity(b)) - Date.parse(lastActivity(a)));

  return (
    <section aria-labelledby="sessions-title">
      <header className="view-head">
        <h1 id="sessions-title">Sessions</h1>
        <div className="spacer" />
        <button type="button" className="primary" aria-expanded={creating} onClick={() => setCreating(!creating)}>
          New session
        </button>
      </header>
      {creating && <NewSessionForm onCancel={() => setCreating(false)} />}
      {error && (
        <p className="banner bad" role="alert">
          {error}
        </p>
      )}
      {sessions === undefined ? (
        !error && <p className="muted pad">Loading…</p>
      ) : sessions.length === 0 ? (
        <p className="muted pad">No sessions yet. Start one with “New session”.</p>
      ) : (
        <div className="table-wrap">
          <table className="grid" aria-label="Sessions">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Session</th>
                <th scope="col">Agent</th>
                <th scope="col">State</th>
                <th scope="col" className="num">Pending</th>
                <th scope="col" className="num">Turns</th>
                <th scope="col">Last activity</th>
              </tr>
            </thead>
            <tbody>
              {sorted.map((s) => {
                const pending = s.pendingPermissions.length + s.pendingQuestions.length;
                const last = lastActivity(s);
                const name = nameOf(s);
                return (
                  <tr key={s.id} {...rowLink(href("sessions", s.id))}>
                    <td>
                      <a href={href("sessions", s.id)} className="mono name" title={`open session ${s.id}`}>
                        {name ?? s.id}
                      </a>
                    </td>
                    {/* Unnamed (made through the API without a label), its id is its name. */}
                    <td className="mono small muted">{name === undefined ? "" : s.id}</td>
                    <td>
                      {s.agent}
                      {s.model && <span className="muted"> · {s.model}</span>}
                    </td>
                    <td>
                      <StateBadge state={s.state} />
                    </td>
                    <td className="num">
                      {pending > 0 ? (
                        <span className="badge state-awaitingInput" title={`${s.pendingPermissions.length} permissions, ${s.pendingQuestions.length} questions`}>
                          {pending}
                        </span>
                      ) : (
                        <span className="muted">0</span>
                      )}
                    </td>
                    <td className="num">{s.turnsCompleted}</td>
                    <td title={absoluteTime(last)}>{relativeTime(last, now)}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {notStarted.length > 0 && <NotStarted sessions={notStarted} />}
    </section>
  );
}

/** Sessions the folder declares that have no node-agent session yet, and why. */
function NotStarted({ sessions }: { sessions: ResourceView[] }) {
  return (
    <div className="resource-group">
      <h2>
        Declared, not started <span className="muted small">{sessions.length}</span>
      </h2>
      <div className="table-wrap">
        <table className="grid" aria-label="Sessions not started">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Phase</th>
              <th scope="col">Why</th>
              <th scope="col">File</th>
            </tr>
          </thead>
          <tbody>
            {sessions.map((r) => (
              <tr key={`${r.namespace}/${r.name}`}>
                <td className="mono name">{resourceName(r)}</td>
                <td>
                  <span className="badge phase-pending">{r.phase}</span>
                </td>
                <td className="small">
                  {r.reason ?? <span className="muted">waiting</span>}
                  {r.message ? `: ${r.message}` : ""}
                </td>
                <td className="mono small">{r.file ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}

/** KEY=VALUE lines (blank lines and # comments skipped) into an environment. */
export function parseEnv(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  text.split("\n").forEach((raw, index) => {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) return;
    const eq = line.indexOf("=");
    const key = eq === -1 ? "" : line.slice(0, eq).trim();
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new Error(`Environment line ${index + 1}: expected KEY=VALUE, not “${line}”`);
    env[key] = line.slice(eq + 1);
  });
  return env;
}

function NewSessionForm({ onCancel }: { onCancel: () => void }) {
  const { plane } = useConnection();
  const [agents, setAgents] = useState<AgentInfo[] | undefined>();
  const [agent, setAgent] = useState("");
  const [modes, setModes] = useState<AgentModes | undefined>();
  const [models, setModels] = useState<AgentModels | undefined>();
  const [version, setVersion] = useState("");
  const [agentMode, setAgentMode] = useState("");
  const [permissionMode, setPermissionMode] = useState<PermissionMode | "">("");
  const [model, setModel] = useState("");
  const [workingDir, setWorkingDir] = useState("");
  const [env, setEnv] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();

  useEffect(() => {
    plane.agents.list().then(
      (list) => {
        setAgents(list);
        setAgent((current) => current || (list.find((a) => a.installed && a.id !== "mock") ?? list.find((a) => a.installed) ?? list[0])?.id || "");
      },
      (err: unknown) => setError(errorText(err)),
    );
  }, [plane]);

  useEffect(() => {
    if (!agent) return;
    setModes(undefined);
    setModels(undefined);
    setAgentMode("");
    setPermissionMode("");
    const stop = new AbortController();
    plane.agents.modes(agent, stop.signal).then(setModes, () => {});
    plane.agents.models(agent, stop.signal).then(setModels, () => {});
    return () => stop.abort();
  }, [plane, agent]);

  const selected = agents?.find((a) => a.id === agent);

  const submit = async () => {
    setError(undefined);
    let request: CreateSessionRequest;
    try {
      request = { agent };
      if (version.trim()) request.agentVersion = version.trim();
      if (agentMode) request.agentMode = agentMode;
      if (permissionMode) request.permissionMode = permissionMode;
      if (model.trim()) request.model = model.trim();
      if (workingDir.trim()) request.workingDir = workingDir.trim();
      const parsed = parseEnv(env);
      if (Object.keys(parsed).length > 0) request.env = parsed;
    } catch (err) {
      setError(errorText(err));
      return;
    }
    setBusy(true);
    try {
      const session = await plane.sessions.create(request);
      navigate("sessions", session.id);
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };

  return (
    <form
      className="panel form-grid"
      aria-label="New session"
      onSubmit={(event) => {
        event.preventDefault();
        void submit();
      }}
    >
      <Field label="Agent">
        <select value={agent} onChange={(event) => setAgent(event.target.value)} disabled={!agents}>
          {(agents ?? []).map((a) => (
            <option key={a.id} value={a.id}>
              {a.id}
              {a.installed ? (a.version ? ` ${a.version}` : "") : " (not installed: installed on first use)"}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Version">
        <input type="text" value={version} onChange={(event) => setVersion(event.target.value)} placeholder={selected?.version ?? "the pinned one"} />
      </Field>
      <Field label="Agent mode">
        <select value={agentMode} onChange={(event) => setAgentMode(event.target.value)}>
          <option value="">default{modes?.defaultAgentMode ? ` (${modes.defaultAgentMode})` : ""}</option>
          {(modes?.agentModes ?? []).map((m) => (
            <option key={m.id} value={m.id} title={m.description}>
              {m.id}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Permission mode">
        <select value={permissionMode} onChange={(event) => setPermissionMode(event.target.value as PermissionMode | "")}>
          <option value="">default</option>
          {(modes?.permissionModes ?? []).filter((m) => m !== "default").map((m) => (
            <option key={m} value={m}>
              {m}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Model">
        <input
          type="text"
          list="model-options"
          value={model}
          onChange={(event) => setModel(event.target.value)}
          placeholder={models?.defaultModel ? `default: ${models.defaultModel}` : "the agent's default"}
        />
      </Field>
      <datalist id="model-options">
        {(models?.models ?? []).map((m) => (
          <option key={m.id} value={m.id}>
            {m.description}
          </option>
        ))}
      </datalist>
      <Field label="Working directory">
        <input type="text" value={workingDir} onChange={(event) => setWorkingDir(event.target.value)} placeholder="the node agent's own" />
      </Field>
      <Field label="Environment" className="wide">
        <textarea
          rows={3}
          value={env}
          onChange={(event) => setEnv(event.target.value)}
          placeholder={"KEY=VALUE, one a line (kept by the node agent, never shown again)"}
          spellCheck={false}
        />
      </Field>
      <div className="buttons wide">
        <button type="submit" className="primary" disabled={busy || !agent}>
          {busy ? "Creating…" : "Create session"}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
        {error && (
          <span className="bad-text" role="alert">
            {error}
          </span>
        )}
      </div>
    </form>
  );
}
