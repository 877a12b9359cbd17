// The sessions of the node agent, and the form that starts one.
import type { AgentInfo, AgentModels, AgentModes, CreateSessionRequest, PermissionMode, SessionInfo } from "@agentplane/sdk";
import { useEffect, useRef, useState } from "react";
import { Field } from "../components/Field";
import { useConnection } from "../context";
import { absoluteTime, errorText, relativeTime, useNow } from "../format";
import { href, navigate } from "../router";

const POLL_MS = 3000;

export function StateBadge({ state }: { state: string }) {
  return <span className={`badge state-${state}`}>{state === "awaitingInput" ? "awaiting input" : state}</span>;
}

export function SessionList() {
  const { plane } = useConnection();
  const [sessions, setSessions] = useState<SessionInfo[] | undefined>();
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
        const list = await plane.sessions.list(stop.signal);
        setSessions(list);
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
  }, [plane]);

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
          <table className="grid">
            <thead>
              <tr>
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
                return (
                  <tr key={s.id}>
                    <td>
                      <a href={href("sessions", s.id)} className="mono">
                        {s.id}
                      </a>
                      {s.label && <div className="muted small">{s.label}</div>}
                    </td>
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
    </section>
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
