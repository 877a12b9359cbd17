// The agents the node agent can drive, and installing their CLIs with progress.
import type { AgentInfo, InstallProgress } from "@agentplane/sdk";
import { useCallback, useEffect, useState } from "react";
import { useConnection } from "../context";
import { errorText } from "../format";

interface InstallState {
  progress: InstallProgress | undefined;
  done: string | undefined;
  error: string | undefined;
  running: boolean;
}

/** How far along an install is, by its phase (npm does not say how many packages to expect). */
const PHASE_VALUE: Record<string, number> = { resolving: 0.25, downloading: 0.55, verifying: 0.85, done: 1 };

const CAPABILITIES: [keyof AgentInfo["capabilities"], string][] = [
  ["permissions", "permissions"],
  ["questions", "questions"],
  ["resume", "resume"],
  ["streamingDeltas", "streaming"],
];

/** An agent the node agent has in itself (the mock): installed, with no executable. */
function builtIn(agent: AgentInfo): boolean {
  return agent.installed && !agent.path;
}

export function Agents() {
  const { plane } = useConnection();
  const [agents, setAgents] = useState<AgentInfo[] | undefined>();
  const [error, setError] = useState<string | undefined>();
  const [installs, setInstalls] = useState<Record<string, InstallState>>({});

  const load = useCallback(() => {
    plane.agents.list().then(
      (list) => {
        setAgents(list);
        setError(undefined);
      },
      (err: unknown) => setError(errorText(err)),
    );
  }, [plane]);
  useEffect(load, [load]);

  const update = (agent: string, fields: Partial<InstallState>) =>
    setInstalls((old) => ({
      ...old,
      [agent]: { ...{ progress: undefined, done: undefined, error: undefined, running: false }, ...old[agent], ...fields },
    }));

  const install = async (agent: string) => {
    update(agent, { running: true, progress: undefined, done: undefined, error: undefined });
    try {
      const result = await plane.agents.install(agent, {}, { onProgress: (progress) => update(agent, { progress }) });
      update(agent, {
        running: false,
        done: result.alreadyInstalled ? `${result.version} was installed already` : `Installed ${result.version}`,
      });
      load();
    } catch (err) {
      update(agent, { running: false, error: errorText(err) });
    }
  };

  return (
    <section aria-labelledby="agents-title">
      <header className="view-head">
        <h1 id="agents-title">Agents</h1>
      </header>
      {error && (
        <p className="banner bad" role="alert">
          {error}
        </p>
      )}
      {agents === undefined ? (
        !error && <p className="muted pad">Loading…</p>
      ) : (
        <div className="table-wrap">
          <table className="grid">
            <thead>
              <tr>
                <th scope="col">Agent</th>
                <th scope="col">Installed</th>
                <th scope="col">Version</th>
                <th scope="col">Credentials found</th>
                <th scope="col">Capabilities</th>
                <th scope="col">Install</th>
              </tr>
            </thead>
            <tbody>
              {agents.map((agent) => {
                const state = installs[agent.id];
                const progress = state?.progress;
                return (
                  <tr key={agent.id}>
                    <th scope="row" className="mono">
                      {agent.id}
                    </th>
                    <td>{agent.installed ? <span className="badge ok">yes</span> : <span className="badge">no</span>}</td>
                    <td className="mono">
                      {agent.version ?? <span className="muted">—</span>}
                      {agent.path && <div className="muted small">{agent.path}</div>}
                      {builtIn(agent) && <div className="muted small">built in</div>}
                    </td>
                    <td>{agent.credentialsAvailable ? <span className="badge ok">found</span> : <span className="badge warn">none</span>}</td>
                    <td>
                      <div className="chips">
                        {CAPABILITIES.map(([key, label]) => (
                          <span key={key} className={`chip ${agent.capabilities[key] ? "on" : "off"}`} title={agent.capabilities[key] ? `has ${label}` : `no ${label}`}>
                            {agent.capabilities[key] ? "✓" : "✗"} {label}
                          </span>
                        ))}
                      </div>
                    </td>
                    <td className="install-cell">
                      <button
                        type="button"
                        aria-label={`Install ${agent.id}`}
                        disabled={state?.running || builtIn(agent)}
                        title={builtIn(agent) ? "built into the node agent: nothing to install" : `npm install of ${agent.id}'s pinned version`}
                        onClick={() => void install(agent.id)}
                      >
                        Install
                      </button>
                      {state?.running && (
                        <div className="install-progress">
                          <progress aria-label={`Installing ${agent.id}`} max={1} value={PHASE_VALUE[progress?.phase ?? "resolving"] ?? 0.1} />
                          <span className="muted small">
                            {progress
                              ? `${progress.phase} ${progress.version} · ${progress.packagesResolved} packages · ${progress.tarballsFetched} tarballs${progress.message ? ` · ${progress.message}` : ""}`
                              : "starting…"}
                          </span>
                        </div>
                      )}
                      {state?.done && <div className="ok-text small">{state.done}</div>}
                      {state?.error && (
                        <div className="bad-text small" role="alert">
                          {state.error}
                        </div>
                      )}
                    </td>
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
