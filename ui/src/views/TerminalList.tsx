// The processes of the node agent (kept current by its lifecycle events), and the
// button that starts a terminal.
import type { AgentPlane, ProcessInfo } from "@agentplane/sdk";
import { useEffect, useState } from "react";
import { Field } from "../components/Field";
import { useConnection } from "../context";
import { absoluteTime, commandLine, errorText, relativeTime, useNow } from "../format";
import { href, navigate } from "../router";

/** Every process, from a list and then the lifecycle events (listed again after a gap). */
export function useProcesses(plane: AgentPlane): { processes: ProcessInfo[] | undefined; error: string | undefined } {
  const [processes, setProcesses] = useState<ProcessInfo[] | undefined>();
  const [error, setError] = useState<string | undefined>();
  useEffect(() => {
    const stop = new AbortController();
    const byId = new Map<string, ProcessInfo>();
    let frame = 0;
    const publish = () => {
      if (frame) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        setProcesses([...byId.values()].sort((a, b) => Date.parse(a.createdAt) - Date.parse(b.createdAt)));
      });
    };
    const relist = async () => {
      const list = await plane.processes.list({}, stop.signal);
      byId.clear();
      for (const p of list) byId.set(p.id, p);
      publish();
    };
    void (async () => {
      try {
        // Follow first, then list: what changes in between arrives as an event.
        const events = plane.processEvents({ signal: stop.signal });
        const first = events.next();
        await relist();
        setError(undefined);
        for (let next = await first; !next.done; next = await events.next()) {
          const event = next.value;
          if (event.type === "gap" || event.type === "reset") await relist();
          else if (event.type === "process.deleted") byId.delete(event.process.id);
          else byId.set(event.process.id, event.process);
          publish();
        }
      } catch (err) {
        if (!stop.signal.aborted) setError(errorText(err));
      }
    })();
    return () => {
      stop.abort();
      cancelAnimationFrame(frame);
    };
  }, [plane]);
  return { processes, error };
}

/** What fits in the main area, in cells of the terminal font (the view fits it exactly once open). */
function estimateTerminalSize(): { rows: number; cols: number } {
  const main = document.querySelector("main");
  const width = (main?.clientWidth ?? window.innerWidth) - 48;
  const height = (main?.clientHeight ?? window.innerHeight) - 120;
  const canvas = document.createElement("canvas").getContext("2d");
  let cell = 7.8;
  if (canvas) {
    canvas.font = `13px ${getComputedStyle(document.documentElement).getPropertyValue("--mono") || "monospace"}`;
    cell = canvas.measureText("W".repeat(20)).width / 20 || cell;
  }
  return {
    cols: Math.max(20, Math.min(500, Math.floor(width / cell))),
    rows: Math.max(5, Math.min(200, Math.floor(height / 17))),
  };
}

/** A typed command line: split on spaces when it is plain words, else run by `bash -c`. */
export function commandFrom(text: string): { command: string; args: string[] } {
  const trimmed = text.trim();
  if (trimmed === "") return { command: "bash", args: [] };
  if (/^[\w@%+=:,./-]+(?:\s+[\w@%+=:,./-]+)*$/.test(trimmed)) {
    const [command, ...args] = trimmed.split(/\s+/);
    return { command: command as string, args };
  }
  return { command: "bash", args: ["-c", trimmed] };
}

export function TerminalList() {
  const { plane } = useConnection();
  const { processes, error } = useProcesses(plane);
  const [command, setCommand] = useState("");
  const [pipes, setPipes] = useState(false);
  const [busy, setBusy] = useState(false);
  const [startError, setStartError] = useState<string | undefined>();
  const now = useNow(10_000);

  const start = async () => {
    setBusy(true);
    setStartError(undefined);
    try {
      const { command: program, args } = commandFrom(command);
      const created = await plane.processes.create(
        pipes ? { command: program, args, stdin: true } : { command: program, args, pty: estimateTerminalSize() },
      );
      navigate("terminals", created.id);
    } catch (err) {
      setStartError(errorText(err));
      setBusy(false);
    }
  };

  return (
    <section aria-labelledby="terminals-title">
      <header className="view-head">
        <h1 id="terminals-title">Terminals</h1>
        <div className="spacer" />
        <form
          className="inline-form"
          onSubmit={(event) => {
            event.preventDefault();
            void start();
          }}
        >
          <Field label="Command" className="inline">
            <input type="text" value={command} onChange={(event) => setCommand(event.target.value)} placeholder="bash" spellCheck={false} className="mono" />
          </Field>
          <label className="check">
            <input type="checkbox" checked={pipes} onChange={(event) => setPipes(event.target.checked)} /> Pipes, no terminal
          </label>
          <button type="submit" className="primary" disabled={busy}>
            New terminal
          </button>
        </form>
      </header>
      {(error || startError) && (
        <p className="banner bad" role="alert">
          {startError ?? error}
        </p>
      )}
      {processes === undefined ? (
        !error && <p className="muted pad">Loading…</p>
      ) : processes.length === 0 ? (
        <p className="muted pad">No processes. “New terminal” starts a bash.</p>
      ) : (
        <div className="table-wrap">
          <table className="grid">
            <thead>
              <tr>
                <th scope="col">Command</th>
                <th scope="col">State</th>
                <th scope="col" className="num">Exit code</th>
                <th scope="col">Signal</th>
                <th scope="col">Kind</th>
                <th scope="col">Started</th>
                <th scope="col">Id</th>
              </tr>
            </thead>
            <tbody>
              {[...processes].reverse().map((p) => (
                <tr key={p.id}>
                  <td>
                    <a href={href("terminals", p.id)} className="mono">
                      {commandLine(p.command, p.args)}
                    </a>
                    {(p.label || p.tag) && <div className="muted small">{p.label ?? p.tag}</div>}
                  </td>
                  <td>
                    <span className={`badge proc-${p.status}`}>{p.status}</span>
                  </td>
                  <td className="num">{p.exitCode ?? <span className="muted">—</span>}</td>
                  <td>{p.signal ?? <span className="muted">—</span>}</td>
                  <td>{p.pty ? `terminal${p.size ? ` ${p.size.cols}×${p.size.rows}` : ""}` : "pipes"}</td>
                  <td title={absoluteTime(p.createdAt)}>{relativeTime(p.createdAt, now)}</td>
                  <td className="mono muted small">{p.id}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}
