// The shell: connecting (a form, a saved token, or a one-time #code=), then the
// navigation and the view the hash names.
import { AgentPlane } from "@agentplane/sdk";
import { lazy, Suspense, useCallback, useEffect, useState } from "react";
import {
  type ConnectProblem,
  type Connection,
  connect,
  defaultEndpoint,
  explain,
  normalizeEndpoint,
  savedCredentials,
} from "./api/connection";
import { Field } from "./components/Field";
import { loggingFetch } from "./api/requestLog";
import { ConnectionContext } from "./context";
import { href, type Route, useRoute } from "./router";
import { Agents } from "./views/Agents";
import { ConversationView } from "./views/Conversation";
import { Requests } from "./views/Requests";
import { Resources } from "./views/Resources";
import { SessionList } from "./views/SessionList";
import { TerminalList } from "./views/TerminalList";

const TerminalView = lazy(() => import("./views/TerminalView"));

type Status = { kind: "idle" } | { kind: "connecting"; what: string } | { kind: "failed"; problem: ConnectProblem };

/** The one-time code of `#code=...`, taken out of the address at once. */
function takeCode(): string | undefined {
  const match = /^#code=([^&]*)/.exec(location.hash);
  if (!match) return undefined;
  history.replaceState(history.state, "", location.pathname + location.search);
  try {
    return decodeURIComponent(match[1] ?? "");
  } catch {
    return match[1];
  }
}

export function App() {
  const [connection, setConnection] = useState<Connection | null>(null);
  const [status, setStatus] = useState<Status>(() => {
    const saved = savedCredentials.get();
    if (location.hash.startsWith("#code=")) return { kind: "connecting", what: defaultEndpoint() };
    return saved ? { kind: "connecting", what: saved.endpoint } : { kind: "idle" };
  });
  const [endpoint, setEndpoint] = useState(() => savedCredentials.endpoint() ?? defaultEndpoint());

  const open = useCallback(async (target: string, token: string) => {
    setStatus({ kind: "connecting", what: target });
    const refused = () => {
      savedCredentials.forgetToken();
      setConnection(null);
      setStatus({
        kind: "failed",
        problem: { title: "The node agent refused this token", detail: "It no longer takes the token this page had (did it restart with another?). Connect again." },
      });
    };
    try {
      const next = await connect(target, token, refused);
      savedCredentials.save(next.baseUrl, token);
      setConnection(next);
      setStatus({ kind: "idle" });
    } catch (error) {
      setStatus({ kind: "failed", problem: await explain(error, target) });
    }
  }, []);

  // At load: a one-time code in the fragment, else a token this tab kept.
  useEffect(() => {
    const code = takeCode();
    if (code) {
      const target = defaultEndpoint();
      setStatus({ kind: "connecting", what: target });
      void (async () => {
        try {
          const base = normalizeEndpoint(target);
          const token = await AgentPlane.exchangeCode({ baseUrl: base, code, fetch: loggingFetch(base) });
          await open(target, token);
        } catch (error) {
          setStatus({ kind: "failed", problem: await explain(error, target) });
        }
      })();
      return;
    }
    const saved = savedCredentials.get();
    if (saved) void open(saved.endpoint, saved.token);
  }, [open]);

  const disconnect = () => {
    savedCredentials.forgetToken();
    setConnection(null);
    setStatus({ kind: "idle" });
  };

  if (!connection) {
    return <ConnectForm endpoint={endpoint} setEndpoint={setEndpoint} status={status} onConnect={open} />;
  }
  return (
    <ConnectionContext.Provider value={connection}>
      <Shell connection={connection} onDisconnect={disconnect} />
    </ConnectionContext.Provider>
  );
}

function ConnectForm({
  endpoint,
  setEndpoint,
  status,
  onConnect,
}: {
  endpoint: string;
  setEndpoint: (value: string) => void;
  status: Status;
  onConnect: (endpoint: string, token: string) => Promise<void>;
}) {
  const [token, setToken] = useState("");
  const busy = status.kind === "connecting";
  return (
    <main className="connect-page">
      <form
        className="connect"
        aria-labelledby="connect-title"
        onSubmit={(event) => {
          event.preventDefault();
          void onConnect(endpoint, token);
        }}
      >
        <h1 id="connect-title">
          <span className="logo" aria-hidden="true">
            ◆
          </span>{" "}
          agentplane inspector
        </h1>
        <p className="muted small">Connect to a node agent to see its sessions, terminals and agents.</p>
        <Field label="Endpoint">
          <input
            type="text"
            inputMode="url"
            value={endpoint}
            onChange={(event) => setEndpoint(event.target.value)}
            required
            autoComplete="url"
            spellCheck={false}
            placeholder="http://127.0.0.1:2468"
          />
        </Field>
        <Field label="Token">
          <input
            type="password"
            value={token}
            onChange={(event) => setToken(event.target.value)}
            autoComplete="current-password"
            spellCheck={false}
            placeholder="the node agent's --token"
          />
        </Field>
        <p className="muted small">The token stays in this tab (sessionStorage) and is never put in a URL.</p>
        <button type="submit" className="primary" disabled={busy}>
          {busy ? "Connecting…" : "Connect"}
        </button>
        {status.kind === "connecting" && (
          <p className="muted small" role="status">
            Connecting to {status.what}…
          </p>
        )}
        {status.kind === "failed" && (
          <div className="banner bad" role="alert">
            <strong>{status.problem.title}</strong>
            <div>{status.problem.detail}</div>
            {status.problem.command && <pre className="code command">{status.problem.command}</pre>}
          </div>
        )}
      </form>
    </main>
  );
}

const NAV: [route: string, label: string][] = [
  ["sessions", "Sessions"],
  ["terminals", "Terminals"],
  ["agents", "Agents"],
  ["resources", "Resources"],
  ["requests", "Requests"],
];

/**
 * The view an address without one opens: under `agentplane up` (its node agent serves
 * resources) the Resources view, which lists what the folder declares, started or not;
 * else the node agent's sessions.
 */
export function home(connection: Connection): string {
  return connection.resources ? "resources" : "sessions";
}

function Shell({ connection, onDisconnect }: { connection: Connection; onDisconnect: () => void }) {
  const route = useRoute();
  const section = route[0] ?? home(connection);
  const nav = NAV.filter(([name]) => name !== "resources" || connection.resources);
  useEffect(() => {
    const titles: Record<string, string> = { sessions: "Sessions", terminals: "Terminals", agents: "Agents", resources: "Resources", requests: "Requests" };
    document.title = `${route[1] ?? titles[section] ?? "agentplane"} · agentplane inspector`;
  }, [route, section]);
  return (
    <div className="app">
      <header className="topbar">
        <a className="brand" href={href(home(connection))}>
          <span className="logo" aria-hidden="true">
            ◆
          </span>{" "}
          agentplane
        </a>
        <nav aria-label="Main">
          {nav.map(([name, label]) => (
            <a key={name} href={href(name)} aria-current={section === name ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <div className="spacer" />
        <span className="endpoint mono small" title={`node agent ${connection.version}`}>
          {connection.baseUrl}
        </span>
        <button type="button" onClick={onDisconnect}>
          Disconnect
        </button>
      </header>
      <main>
        <View route={route} connection={connection} />
      </main>
    </div>
  );
}

function View({ route, connection }: { route: Route; connection: Connection }) {
  const [section = home(connection), id] = route;
  switch (section) {
    case "sessions":
      return id ? <ConversationView key={id} sessionId={id} /> : <SessionList />;
    case "terminals":
      return id ? (
        <Suspense fallback={<p className="muted pad">Loading the terminal…</p>}>
          <TerminalView key={id} processId={id} />
        </Suspense>
      ) : (
        <TerminalList />
      );
    case "agents":
      return <Agents />;
    case "resources":
      return connection.resources ? <Resources /> : <NotFound />;
    case "requests":
      return <Requests />;
    default:
      return <NotFound />;
  }
}

function NotFound() {
  return (
    <p className="pad">
      Nothing here. Go to <a href={href("sessions")}>Sessions</a>.
    </p>
  );
}
