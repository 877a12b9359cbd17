// One session: its conversation (windowed), the requests waiting for an answer, and
// the box for the next message.
import type { PermissionReply, PermissionRequest, QuestionRequest, SessionInfo, SessionStreamEvent } from "@agentplane/sdk";
import { memo, useCallback, useEffect, useRef, useState } from "react";
import { Output } from "../components/Output";
import { VirtualList } from "../components/VirtualList";
import { useConnection } from "../context";
import { clockTime, count as formatCount, errorText } from "../format";
import { href } from "../router";
import { type ItemRow, type NoteRow, type PermissionRow, planText, type QuestionRow, type Row } from "../session/model";
import { useConversation } from "../session/useConversation";
import { StateBadge } from "./SessionList";

const REPLY_LABEL: Record<PermissionReply, string> = { once: "Allow once", always: "Always allow", reject: "Reject" };
const REPLY_DONE: Record<PermissionReply, string> = { once: "allowed once", always: "always allowed", reject: "rejected" };

/** Session info is refetched after events that change it, at most this often. */
const INFO_DEBOUNCE_MS = 150;
const INFO_EVENTS = /^(session|turn|permission|question)\./;

export function ConversationView({ sessionId }: { sessionId: string }) {
  const { plane } = useConnection();
  const [info, setInfo] = useState<SessionInfo | undefined>();
  const [infoError, setInfoError] = useState<string | undefined>();
  const infoTimer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);

  // At most one fetch at a time, INFO_DEBOUNCE_MS after a change; a change while one is
  // waiting or under way makes one more after it, so the last change is always seen.
  const infoBusy = useRef(false);
  const infoAgain = useRef(false);
  const refreshInfo = useCallback(() => {
    if (infoTimer.current !== undefined || infoBusy.current) {
      infoAgain.current = true;
      return;
    }
    infoTimer.current = setTimeout(() => {
      infoTimer.current = undefined;
      infoBusy.current = true;
      infoAgain.current = false;
      plane.sessions
        .get(sessionId)
        .then(
          (value) => {
            setInfo(value);
            setInfoError(undefined);
          },
          (error: unknown) => setInfoError(errorText(error)),
        )
        .finally(() => {
          infoBusy.current = false;
          if (infoAgain.current) refreshInfo();
        });
    }, INFO_DEBOUNCE_MS);
  }, [plane, sessionId]);

  useEffect(() => {
    setInfo(undefined);
    refreshInfo();
    return () => {
      clearTimeout(infoTimer.current);
      infoTimer.current = undefined;
      infoAgain.current = false;
    };
  }, [refreshInfo]);

  const onBatch = useCallback(
    (events: SessionStreamEvent[]) => {
      if (events.some((event) => INFO_EVENTS.test(event.type))) refreshInfo();
    },
    [refreshInfo],
  );
  const { conversation, version, state, error, follow } = useConversation(plane, sessionId, onBatch);

  const renderRow = useCallback((row: Row) => <RowView row={row} rev={row.rev} agent={info?.agent} />, [info?.agent]);
  const pendingPermissions = [...conversation.pendingPermissions.values()];
  const pendingQuestions = [...conversation.pendingQuestions.values()];
  const live = info ? info.state !== "ended" && info.state !== "failed" : !conversation.ended;

  return (
    <section className="conversation" aria-label={`Session ${sessionId}`}>
      <header className="view-head">
        <a href={href("sessions")} className="back">
          ← Sessions
        </a>
        <h1 className="mono">{sessionId}</h1>
        {info && (
          <div className="facts">
            <StateBadge state={info.state} />
            {info.label && <span className="muted" title="label">{info.label}</span>}
            <span title="agent">{info.agent}{info.agentVersion ? ` ${info.agentVersion}` : ""}</span>
            {info.model && <span title="model">{info.model}</span>}
            <span title="permission mode">{info.permissionMode}</span>
            {info.agentMode && <span title="agent mode">{info.agentMode}</span>}
            <span className="muted">
              {info.turnsCompleted} turns · {conversation.lastSequence} events
            </span>
          </div>
        )}
        <div className="spacer" />
        <FollowBadge state={state} />
        <SessionActions info={info} onChanged={() => { refreshInfo(); if (info?.state === "failed") follow(); }} />
      </header>
      {infoError && <p className="banner bad">{infoError}</p>}
      {info?.error && <p className="banner bad">{info.error}</p>}
      {error && (
        <p className="banner bad" role="alert">
          The event stream stopped: {error}{" "}
          <button type="button" onClick={follow}>
            Reconnect
          </button>
        </p>
      )}
      {state === "loading" && conversation.rows.length === 0 ? (
        <p className="muted pad">Loading the conversation…</p>
      ) : (
        <VirtualList
          items={conversation.partialFrom !== undefined ? [earlierRow(conversation.partialFrom), ...conversation.rows] : conversation.rows}
          version={version}
          getKey={rowKey}
          render={renderRow}
          stickToBottom
          estimate={56}
          className="rows"
          label="Conversation"
        />
      )}
      {(pendingPermissions.length > 0 || pendingQuestions.length > 0) && (
        <div className="pending" role="region" aria-label="Waiting for you">
          {pendingPermissions.map((row) => (
            <PermissionCard key={row.key} sessionId={sessionId} request={row.request} />
          ))}
          {pendingQuestions.map((row) => (
            <QuestionCard key={row.key} sessionId={sessionId} request={row.request} />
          ))}
        </div>
      )}
      <Composer sessionId={sessionId} disabled={!live} onSent={refreshInfo} />
    </section>
  );
}

/** Stands for the events not read in yet while a long session opens at its end. */
function earlierRow(count: number): NoteRow {
  return { type: "gap", key: "earlier", rev: 0, time: undefined, text: `Reading ${formatCount(count)} earlier events…`, tone: "plain" };
}

function rowKey(row: Row): string {
  return row.key;
}

function FollowBadge({ state }: { state: string }) {
  const text = { loading: "loading", live: "live", ended: "ended", failed: "disconnected" }[state] ?? state;
  return <span className={`follow follow-${state}`} title="event stream">{text}</span>;
}

function SessionActions({ info, onChanged }: { info: SessionInfo | undefined; onChanged: () => void }) {
  const { plane } = useConnection();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  if (!info) return null;
  const run = async (action: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      await action();
      onChanged();
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="actions">
      {error && <span className="bad-text">{error}</span>}
      {info.state === "failed" && (
        <button type="button" disabled={busy} onClick={() => run(() => plane.sessions.restart(info.id))}>
          Restart
        </button>
      )}
      {info.state !== "ended" && info.state !== "failed" && (
        <button
          type="button"
          className="danger"
          disabled={busy}
          onClick={() => {
            if (confirm(`End session ${info.id}? A turn under way is interrupted.`)) void run(() => plane.sessions.end(info.id));
          }}
        >
          End session
        </button>
      )}
    </div>
  );
}

// ---- rows ------------------------------------------------------------------------------

const RowView = memo(
  function RowView({ row, agent }: { row: Row; rev: number; agent: string | undefined }) {
    switch (row.type) {
      case "item":
        return <ItemView row={row} agent={agent} />;
      case "permission":
        return <PermissionHistory row={row} />;
      case "question":
        return <QuestionHistory row={row} />;
      default:
        return <NoteView row={row} />;
    }
  },
  (a, b) => a.row === b.row && a.rev === b.rev && a.agent === b.agent,
);

function Time({ time }: { time: string | undefined }) {
  if (!time) return null;
  return (
    <time className="time" dateTime={time}>
      {clockTime(time)}
    </time>
  );
}

function StatusTag({ status }: { status: string | null | undefined }) {
  if (!status || status === "completed") return null;
  const label = status === "inProgress" ? "running" : status;
  return <span className={`tag tag-${status}`}>{label}</span>;
}

function ItemView({ row, agent }: { row: ItemRow; agent: string | undefined }) {
  const { item } = row;
  switch (item.kind) {
    case "message": {
      const role = item.role ?? "assistant";
      const who = role === "user" ? "You" : role === "system" ? "System" : (agent ?? "Assistant");
      return (
        <article className={`msg msg-${role}`}>
          <div className="row-head">
            <span className="who">{who}</span>
            <StatusTag status={item.status} />
            <Time time={row.time} />
          </div>
          <div className="text">
            {row.text}
            {item.status === "inProgress" && <span className="caret" aria-hidden="true" />}
          </div>
        </article>
      );
    }
    case "reasoning":
      return <Reasoning row={row} />;
    case "tool_call":
      return <ToolCall row={row} />;
    case "file_change":
      return (
        <article className="tool" aria-label={`File change ${item.path ?? ""}`}>
          <div className="row-head">
            <span className="who">File change</span>
            <code>{item.path ?? ""}</code>
            <StatusTag status={item.status} />
            <Time time={row.time} />
          </div>
          {row.text && <Output id={row.key} text={row.text} label={`change of ${item.path ?? "a file"}`} />}
        </article>
      );
    case "tool_result": {
      const processId = typeof item.input?.processId === "string" ? item.input.processId : undefined;
      return (
        <article className="tool" aria-label="Tool result">
          <div className="row-head">
            <span className="who">{item.tool === "process" ? "Process" : item.tool ? `${item.tool} result` : "Result"}</span>
            {item.text && <span className="summary">{item.text}</span>}
            {processId && (
              <a href={href("terminals", processId)} className="small">
                open
              </a>
            )}
            <StatusTag status={item.status} />
            <Time time={row.time} />
          </div>
          {row.text ? (
            <Output id={row.key} text={row.text} label="result" />
          ) : (
            <p className="muted small">{item.status === "inProgress" ? "no output yet" : "no output"}</p>
          )}
        </article>
      );
    }
    default:
      return (
        <div className="note note-plain">
          <span>{row.text || item.kind}</span>
          <Time time={row.time} />
        </div>
      );
  }
}

/** Which reasoning rows are open: kept while they scroll out of the window and back. */
const openReasoning = new Set<string>();

function Reasoning({ row }: { row: ItemRow }) {
  const [open, setOpen] = useState(() => openReasoning.has(row.key));
  return (
    <details
      className="reasoning"
      open={open}
      onToggle={(event) => {
        const now = (event.currentTarget as HTMLDetailsElement).open;
        if (now) openReasoning.add(row.key);
        else openReasoning.delete(row.key);
        setOpen(now);
      }}
    >
      <summary>
        Reasoning {row.item.status === "inProgress" && <span className="muted">(thinking…)</span>}
        <Time time={row.time} />
      </summary>
      <div className="text">{row.text}</div>
    </details>
  );
}

function toolInputText(input: Record<string, unknown> | null | undefined): string | undefined {
  if (!input || Object.keys(input).length === 0) return undefined;
  if (typeof input.command === "string" && Object.keys(input).length === 1) return `$ ${input.command}`;
  for (const key of ["diff", "patch"]) if (typeof input[key] === "string") return input[key] as string;
  return JSON.stringify(input, null, 2);
}

function ToolCall({ row }: { row: ItemRow }) {
  const { item, result, permission } = row;
  const input = toolInputText(item.input);
  return (
    <article className="tool" aria-label={`Tool call ${item.tool ?? ""}`}>
      <div className="row-head">
        <span className="who">Tool</span>
        <code className="tool-name">{item.tool ?? "?"}</code>
        <StatusTag status={item.status} />
        {permission && (
          <span className={`tag ${permission.reply === "reject" ? "tag-denied" : ""}`}>
            {permission.reply === undefined ? "waiting for permission" : permission.reply === null ? "request cancelled" : REPLY_DONE[permission.reply]}
          </span>
        )}
        <Time time={row.time} />
      </div>
      {input !== undefined && <Output id={`${row.key}-in`} text={input} label="input" className="tool-input" />}
      {result && (
        <div className="result">
          <div className="result-head">
            result {result.item.text && <span>— {result.item.text}</span>} <StatusTag status={result.item.status} />
          </div>
          {result.text ? <Output id={`${row.key}-out`} text={result.text} label="result" /> : <p className="muted small">no output</p>}
        </div>
      )}
    </article>
  );
}

function PermissionHistory({ row }: { row: PermissionRow }) {
  const { request, reply } = row;
  const plan = planText(request);
  const state = reply === undefined ? "waiting for an answer" : reply === null ? "cancelled" : REPLY_DONE[reply];
  return (
    <div className={`note note-${reply === "reject" ? "warn" : "plain"}`}>
      <span>
        {plan !== undefined ? "Plan approval" : "Permission"} asked for <code>{request.tool}</code>
        {typeof request.input?.command === "string" && (
          <>
            : <code>{request.input.command}</code>
          </>
        )}{" "}
        — {state}
      </span>
      <Time time={row.time} />
    </div>
  );
}

function QuestionHistory({ row }: { row: QuestionRow }) {
  const { request, outcome, answers } = row;
  return (
    <div className="question-history">
      <div className="row-head">
        <span className="who">Question</span>
        <span className="tag">{outcome ?? "waiting for an answer"}</span>
        <Time time={row.time} />
      </div>
      {request.questions.map((q, i) => (
        <div key={i} className="small">
          {q.header && <strong>{q.header}: </strong>}
          {q.question}
          {answers?.[i] && answers[i].length > 0 && <span className="answer"> → {answers[i].join(", ")}</span>}
        </div>
      ))}
    </div>
  );
}

function NoteView({ row }: { row: NoteRow }) {
  if (row.type === "turn" && row.tone === "plain") {
    return (
      <div className="turn-divider" role="separator" aria-label={row.text}>
        <span>{row.text}</span>
        <Time time={row.time} />
      </div>
    );
  }
  if (row.type === "unparsed") {
    return (
      <div className="note note-warn unparsed">
        <span className="tag">unparsed</span>
        <code className="raw">{row.text}</code>
        {row.detail && <span className="muted small">{row.detail}</span>}
        <Time time={row.time} />
      </div>
    );
  }
  return (
    <div className={`note note-${row.tone}`} role={row.type === "error" ? "note" : undefined}>
      <span>
        {row.type === "error" && <strong>Error: </strong>}
        {row.text}
        {row.detail && <span className="muted"> ({row.detail})</span>}
      </span>
      <Time time={row.time} />
    </div>
  );
}

// ---- pending requests ------------------------------------------------------------------

function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  const run = async (action: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      await action();
    } catch (err) {
      setError(errorText(err));
      setBusy(false);
    }
  };
  return { busy, error, run };
}

function PermissionCard({ sessionId, request }: { sessionId: string; request: PermissionRequest }) {
  const { plane } = useConnection();
  const { busy, error, run } = useAction();
  const plan = planText(request);
  const options: PermissionReply[] = request.options.length > 0 ? request.options : ["once", "always", "reject"];
  const command = typeof request.input?.command === "string" ? request.input.command : undefined;
  const title = plan !== undefined ? "Plan approval" : `Permission: ${request.tool}`;
  return (
    <div className="card" role="group" aria-label={title}>
      <div className="card-head">
        <strong>{title}</strong>
        <span className="muted small">
          {plan !== undefined ? "The agent asks to go ahead with this plan." : `The agent asks to run ${request.tool}.`}
        </span>
      </div>
      {plan !== undefined ? (
        <pre className="code plan" aria-label="Plan">
          {plan}
        </pre>
      ) : command !== undefined ? (
        <pre className="code">$ {command}</pre>
      ) : (
        <Output text={JSON.stringify(request.input, null, 2)} label="input" />
      )}
      <div className="buttons">
        {options.map((option) => (
          <button
            key={option}
            type="button"
            disabled={busy}
            className={option === "reject" ? "danger" : option === "once" ? "primary" : ""}
            onClick={() => run(() => plane.sessions.replyPermission(sessionId, request.id, option))}
          >
            {REPLY_LABEL[option]}
          </button>
        ))}
        {error && <span className="bad-text">{error}</span>}
      </div>
    </div>
  );
}

function QuestionCard({ sessionId, request }: { sessionId: string; request: QuestionRequest }) {
  const { plane } = useConnection();
  const { busy, error, run } = useAction();
  const [chosen, setChosen] = useState<string[][]>(() => request.questions.map(() => []));
  const [texts, setTexts] = useState<string[]>(() => request.questions.map(() => ""));
  const single = request.questions.length === 1;

  const answers = (): string[][] =>
    request.questions.map((_, i) => {
      const text = texts[i]?.trim();
      return text ? [...(chosen[i] ?? []), text] : (chosen[i] ?? []);
    });
  const reply = (value: string[][]) => run(() => plane.sessions.replyQuestion(sessionId, request.id, value));
  const toggle = (i: number, option: string, multi: boolean) =>
    setChosen((old) =>
      old.map((list, j) => (j !== i ? list : multi ? (list.includes(option) ? list.filter((o) => o !== option) : [...list, option]) : [option])),
    );

  return (
    <div className="card" role="group" aria-label="Question">
      <div className="card-head">
        <strong>Question</strong>
        <span className="muted small">The agent asks{single ? "" : ` ${request.questions.length} questions`}.</span>
      </div>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          void reply(answers());
        }}
      >
        {request.questions.map((q, i) => {
          const multi = q.multiSelect ?? false;
          const options = q.options ?? [];
          return (
            <fieldset key={i} className="question" disabled={busy}>
              <legend>
                {q.header && <span className="tag">{q.header}</span>} {q.question}
              </legend>
              {multi ? (
                <div className="choices">
                  {options.map((option) => (
                    <label key={option} className="check">
                      <input type="checkbox" checked={chosen[i]?.includes(option) ?? false} onChange={() => toggle(i, option, true)} /> {option}
                    </label>
                  ))}
                </div>
              ) : (
                <div className="choices">
                  {options.map((option) => (
                    <button
                      key={option}
                      type="button"
                      aria-pressed={single ? undefined : (chosen[i]?.includes(option) ?? false)}
                      className={chosen[i]?.includes(option) ? "chosen" : ""}
                      // One question, one choice: the click is the answer.
                      onClick={() => (single ? void reply([[option]]) : toggle(i, option, false))}
                    >
                      {option}
                    </button>
                  ))}
                </div>
              )}
              <input
                type="text"
                className="answer-text"
                aria-label={single ? "Your answer" : `Your answer to: ${q.question}`}
                placeholder={options.length > 0 ? "or write an answer" : "Your answer"}
                value={texts[i] ?? ""}
                onChange={(event) => {
                  const value = event.target.value;
                  setTexts((old) => old.map((t, j) => (j === i ? value : t)));
                }}
              />
            </fieldset>
          );
        })}
        <div className="buttons">
          <button type="submit" className="primary" disabled={busy || answers().every((list) => list.length === 0)}>
            Answer
          </button>
          <button type="button" className="danger" disabled={busy} onClick={() => run(() => plane.sessions.rejectQuestion(sessionId, request.id))}>
            Decline
          </button>
          {error && <span className="bad-text">{error}</span>}
        </div>
      </form>
    </div>
  );
}

// ---- the next message ------------------------------------------------------------------

function Composer({ sessionId, disabled, onSent }: { sessionId: string; disabled: boolean; onSent: () => void }) {
  const { plane } = useConnection();
  const [text, setText] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  const send = async () => {
    const message = text;
    if (!message.trim() || busy || disabled) return;
    setBusy(true);
    setError(undefined);
    try {
      await plane.sessions.send(sessionId, message);
      setText("");
      onSent();
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form
      className="composer"
      onSubmit={(event) => {
        event.preventDefault();
        void send();
      }}
    >
      <label htmlFor="composer-message" className="visually-hidden">
        Message
      </label>
      <textarea
        id="composer-message"
        value={text}
        rows={3}
        disabled={disabled}
        placeholder={disabled ? "This session has ended." : "Message the agent (Ctrl+Enter sends)"}
        onChange={(event) => setText(event.target.value)}
        onKeyDown={(event) => {
          if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
            event.preventDefault();
            void send();
          }
        }}
      />
      <div className="composer-side">
        <button type="submit" className="primary" disabled={disabled || busy || !text.trim()}>
          Send
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
