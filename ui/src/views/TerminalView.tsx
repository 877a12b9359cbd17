// One process: a terminal (xterm.js over the SDK's resuming Terminal), or a pipe
// process's stdout and stderr side by side. Loaded on demand: xterm.js is most of the JS.
import type { ProcessInfo, Terminal as PlaneTerminal, TerminalState } from "@agentplane/sdk";
import { FitAddon } from "@xterm/addon-fit";
import { type ITheme, Terminal as XTerm } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "react";
import { Field } from "../components/Field";
import { useConnection } from "../context";
import { base64ToBytes, commandLine, errorText, isAbort } from "../format";
import { href } from "../router";

const SIGNALS = ["SIGINT", "SIGTERM", "SIGKILL", "SIGHUP"] as const;

declare global {
  interface Window {
    /** For tests: the xterm.js Terminal of each open terminal view, by process id. */
    __inspector: { terminals: Record<string, XTerm> };
  }
}

const LIGHT: ITheme = {
  background: "#ffffff",
  foreground: "#1f2328",
  cursor: "#1f2328",
  cursorAccent: "#ffffff",
  selectionBackground: "#b6d7ff",
  black: "#24292f",
  red: "#cf222e",
  green: "#116329",
  yellow: "#7d4e00",
  blue: "#0969da",
  magenta: "#8250df",
  cyan: "#1b7c83",
  white: "#6e7781",
  brightBlack: "#57606a",
  brightRed: "#a40e26",
  brightGreen: "#1a7f37",
  brightYellow: "#633c01",
  brightBlue: "#218bff",
  brightMagenta: "#a475f9",
  brightCyan: "#3192aa",
  brightWhite: "#8c959f",
};

const DARK: ITheme = {
  background: "#0d1117",
  foreground: "#d1d7e0",
  cursor: "#d1d7e0",
  cursorAccent: "#0d1117",
  selectionBackground: "#264f78",
  black: "#484f58",
  red: "#ff7b72",
  green: "#3fb950",
  yellow: "#d29922",
  blue: "#58a6ff",
  magenta: "#bc8cff",
  cyan: "#39c5cf",
  white: "#b1bac4",
  brightBlack: "#6e7681",
  brightRed: "#ffa198",
  brightGreen: "#56d364",
  brightYellow: "#e3b341",
  brightBlue: "#79c0ff",
  brightMagenta: "#d2a8ff",
  brightCyan: "#56d4dd",
  brightWhite: "#f0f6fc",
};

function exitLine(exitCode: number | null | undefined, signal: string | null | undefined): string {
  return exitCode !== null && exitCode !== undefined ? `[process exited with code ${exitCode}]` : `[process exited on signal ${signal ?? "?"}]`;
}

export default function TerminalView({ processId }: { processId: string }) {
  const { plane } = useConnection();
  const [info, setInfo] = useState<ProcessInfo | undefined>();
  const [error, setError] = useState<string | undefined>();

  useEffect(() => {
    setInfo(undefined);
    setError(undefined);
    const stop = new AbortController();
    plane.processes.get(processId, stop.signal).then(setInfo, (err: unknown) => {
      if (!stop.signal.aborted) setError(errorText(err));
    });
    // Its state (running, exit) as the lifecycle events tell it.
    void (async () => {
      try {
        for await (const event of plane.processEvents({ signal: stop.signal })) {
          if ("process" in event && event.process.id === processId) setInfo(event.process);
        }
      } catch {
        // the header just stops updating
      }
    })();
    return () => stop.abort();
  }, [plane, processId]);

  return (
    <section className="terminal-view" aria-label={`Process ${processId}`}>
      <header className="view-head">
        <a href={href("terminals")} className="back">
          ← Terminals
        </a>
        <h1 className="mono">{info ? commandLine(info.command, info.args) : processId}</h1>
        {info && (
          <div className="facts">
            <span className={`badge proc-${info.status}`}>{info.status}</span>
            {info.status === "exited" && <span>{exitLine(info.exitCode, info.signal).slice(1, -1)}</span>}
            <span className="muted">pid {info.pid}</span>
            <span className="muted mono small">{info.id}</span>
          </div>
        )}
        <div className="spacer" />
        {info && <SignalButtons processId={processId} pty={info.pty} running={info.status === "running"} />}
      </header>
      {error && (
        <p className="banner bad" role="alert">
          {error}
        </p>
      )}
      {info && (info.pty ? <XtermPane processId={processId} /> : <PipePanes info={info} />)}
    </section>
  );
}

/** Each open view's SDK Terminal (SIGINT goes through it, to the foreground job) and xterm (focus goes back to it). */
const attached = new Map<string, { terminal: PlaneTerminal; xterm: XTerm }>();

function SignalButtons({ processId, pty, running }: { processId: string; pty: boolean; running: boolean }) {
  const { plane } = useConnection();
  const [error, setError] = useState<string | undefined>();
  const send = async (name: (typeof SIGNALS)[number]) => {
    setError(undefined);
    try {
      const view = attached.get(processId);
      // ^C goes to what runs in the terminal, as the key would; the others to the whole process.
      if (pty && name === "SIGINT" && view && view.terminal.state === "open") view.terminal.signal(name);
      else await plane.processes.signal(processId, name);
      view?.xterm.focus();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <div className="signals" role="group" aria-label="Send a signal">
      {error && <span className="bad-text">{error}</span>}
      {SIGNALS.map((name) => (
        <button key={name} type="button" disabled={!running} onClick={() => void send(name)} className={name === "SIGKILL" ? "danger" : ""}>
          {name}
        </button>
      ))}
    </div>
  );
}

function XtermPane({ processId }: { processId: string }) {
  const { plane } = useConnection();
  const host = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<TerminalState>("connecting");
  const [error, setError] = useState<string | undefined>();

  useEffect(() => {
    const element = host.current;
    if (!element) return;
    const dark = window.matchMedia("(prefers-color-scheme: dark)");
    const xterm = new XTerm({
      fontFamily: getComputedStyle(document.documentElement).getPropertyValue("--mono").trim() || "monospace",
      fontSize: 13,
      cursorBlink: true,
      scrollback: 1000,
      allowProposedApi: false,
      theme: dark.matches ? DARK : LIGHT,
    });
    const fit = new FitAddon();
    xterm.loadAddon(fit);
    xterm.open(element);
    window.__inspector.terminals[processId] = xterm;
    const onScheme = () => (xterm.options.theme = dark.matches ? DARK : LIGHT);
    dark.addEventListener("change", onScheme);

    // With no offset the node agent replays what it still holds: the screen comes back
    // as it was, and nothing is written twice (the SDK resumes from the last byte).
    const terminal = plane.processes.terminal(processId, { acks: true });
    attached.set(processId, { terminal, xterm });
    // Flow control. xterm.js parses at its own pace (a few MB/s in a busy tab) and a
    // browser's WebSocket cannot push back, so under a flood the bytes would pile up
    // in socket buffers and the tab, and the screen fall seconds behind. Each chunk
    // is acknowledged once xterm has parsed it, and the node agent sends at most
    // 1 MiB ahead of the last acknowledgement (`acks: true`); slower than the program,
    // the program is held back, then this page is told with a gap what it missed.
    const receive = (bytes: Uint8Array, offset: number) => {
      const end = offset + bytes.byteLength;
      xterm.write(bytes, () => terminal.ack(end));
    };
    const offs = [
      terminal.onData(receive),
      terminal.onGap(({ from, to }) =>
        xterm.write(`\r\n\x1b[2m[… ${to - from} bytes lost …]\x1b[22m\r\n`, () => terminal.ack(to)),
      ),
      terminal.onExit(({ exitCode, signal }) => xterm.write(`\r\n\x1b[2m${exitLine(exitCode, signal)}\x1b[22m\r\n`)),
      terminal.onStateChange(setState),
      terminal.onError((err) => setError(err.message)),
    ];
    const send = (data: string | Uint8Array) => {
      if (terminal.state === "closed" || terminal.exit) return;
      try {
        terminal.write(data);
      } catch (err) {
        setError(errorText(err));
      }
    };
    const typed = xterm.onData((data) => send(data));
    const binary = xterm.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff)));
    const resized = xterm.onResize(({ rows, cols }) => {
      if (terminal.state !== "closed" && !terminal.exit) terminal.resize(rows, cols);
    });

    // Fit to the view now and whenever it changes size (a window resize, a panel).
    let frame = 0;
    const refit = () => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(() => {
        if (element.clientWidth > 0 && element.clientHeight > 0) fit.fit();
      });
    };
    const observer = new ResizeObserver(refit);
    observer.observe(element);
    if (element.clientWidth > 0 && element.clientHeight > 0) fit.fit();
    terminal.resize(xterm.rows, xterm.cols);
    xterm.focus();

    return () => {
      observer.disconnect();
      cancelAnimationFrame(frame);
      dark.removeEventListener("change", onScheme);
      for (const off of offs) off();
      typed.dispose();
      binary.dispose();
      resized.dispose();
      terminal.close();
      attached.delete(processId);
      if (window.__inspector.terminals[processId] === xterm) delete window.__inspector.terminals[processId];
      xterm.dispose();
    };
  }, [plane, processId]);

  return (
    <div className="xterm-wrap">
      <div className="xterm-status">
        <span className={`follow follow-${state === "open" ? "live" : state === "closed" ? "ended" : "loading"}`}>{state}</span>
        {error && <span className="bad-text">{error}</span>}
      </div>
      <div ref={host} className="xterm-host" role="region" aria-label="Terminal" />
    </div>
  );
}

/** Keeps the last MAX_PANE characters of a pane. */
const MAX_PANE = 2_000_000;

function PipePanes({ info }: { info: ProcessInfo }) {
  const { plane } = useConnection();
  const [stdout, setStdout] = useState("");
  const [stderr, setStderr] = useState("");
  const [closed, setClosed] = useState({ stdout: false, stderr: false });
  const [error, setError] = useState<string | undefined>();
  const processId = info.id;

  useEffect(() => {
    const stop = new AbortController();
    setStdout("");
    setStderr("");
    setClosed({ stdout: false, stderr: false });
    const follow = async (stream: "stdout" | "stderr", set: (update: (old: string) => string) => void) => {
      const decoder = new TextDecoder();
      let offset = 0; // from the oldest byte still held
      for (;;) {
        const chunk = await plane.processes.output(processId, { stream, offset, wait: 25, encoding: "base64" }, stop.signal);
        let text = "";
        if (chunk.gap) text += `[… ${chunk.gap.to - chunk.gap.from} bytes lost …]\n`;
        text += decoder.decode(base64ToBytes(chunk.data), { stream: !chunk.eof });
        if (text) set((old) => (old + text).slice(-MAX_PANE));
        offset = chunk.nextOffset;
        if (chunk.eof) break;
      }
      setClosed((old) => ({ ...old, [stream]: true }));
    };
    const fail = (err: unknown) => {
      if (!stop.signal.aborted && !isAbort(err)) setError(errorText(err));
    };
    follow("stdout", setStdout).catch(fail);
    follow("stderr", setStderr).catch(fail);
    return () => stop.abort();
  }, [plane, processId]);

  const done = closed.stdout && closed.stderr && info.status === "exited";
  return (
    <div className="pipes">
      {error && (
        <p className="banner bad" role="alert">
          {error}
        </p>
      )}
      <div className="panes">
        <Pane title="stdout" text={stdout} closed={closed.stdout} />
        <Pane title="stderr" text={stderr} closed={closed.stderr} />
      </div>
      {done && <p className="exit-line mono">{exitLine(info.exitCode, info.signal)}</p>}
      {info.stdin && info.status === "running" && <StdinForm processId={processId} />}
    </div>
  );
}

function Pane({ title, text, closed }: { title: string; text: string; closed: boolean }) {
  const ref = useRef<HTMLPreElement>(null);
  const stick = useRef(true);
  useEffect(() => {
    const el = ref.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  }, [text]);
  return (
    <div className="pane">
      <div className="pane-head">
        {title} {closed && <span className="muted small">(closed)</span>}
      </div>
      <pre
        ref={ref}
        className="code pane-body"
        role="log"
        aria-label={title}
        tabIndex={0}
        onScroll={(event) => {
          const el = event.currentTarget;
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 8;
        }}
      >
        {text}
      </pre>
    </div>
  );
}

function StdinForm({ processId }: { processId: string }) {
  const { plane } = useConnection();
  const [text, setText] = useState("");
  const [error, setError] = useState<string | undefined>();
  const send = async (eof: boolean) => {
    setError(undefined);
    try {
      await plane.processes.input(processId, text ? `${text}\n` : "", { eof });
      setText("");
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <form
      className="inline-form stdin"
      onSubmit={(event) => {
        event.preventDefault();
        void send(false);
      }}
    >
      <Field label="Input" className="inline grow">
        <input type="text" className="mono" value={text} onChange={(event) => setText(event.target.value)} placeholder="a line for its stdin" />
      </Field>
      <button type="submit">Send input</button>
      <button type="button" onClick={() => void send(true)}>
        Close stdin
      </button>
      {error && <span className="bad-text">{error}</span>}
    </form>
  );
}
