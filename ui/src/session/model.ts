// A conversation folded from its universal events: one row per item (deltas appended
// to it, never kept one by one), tool results joined to their calls, and the
// requests still waiting for an answer. Mutable and outside React: events are
// applied in batches, and each changed row gets a new `rev` so only it re-renders.
import type {
  Item,
  PermissionReply,
  PermissionRequest,
  QuestionRequest,
  SessionStreamEvent,
  UniversalEvent,
} from "@agentplane/sdk";

interface RowBase {
  /** Stable across updates: the React key and the height cache key. */
  key: string;
  /** Bumped whenever the row changes. */
  rev: number;
  time: string | undefined;
}

export interface ItemRow extends RowBase {
  type: "item";
  item: Item;
  /** The text so far: deltas appended while it streams, the completed text after. */
  text: string;
  /** A tool call's result, when one names it. */
  result?: { item: Item; text: string } | undefined;
  /** A permission request about this tool call. */
  permission?: PermissionRow | undefined;
}

export interface PermissionRow extends RowBase {
  type: "permission";
  request: PermissionRequest;
  /** `undefined` while pending; `null` when cancelled. */
  reply: PermissionReply | null | undefined;
}

export interface QuestionRow extends RowBase {
  type: "question";
  request: QuestionRequest;
  outcome: "answered" | "rejected" | "cancelled" | undefined;
  answers: string[][] | null | undefined;
}

export interface NoteRow extends RowBase {
  type: "turn" | "session" | "error" | "unparsed" | "gap";
  text: string;
  detail?: string | undefined;
  tone: "plain" | "bad" | "warn";
}

export type Row = ItemRow | PermissionRow | QuestionRow | NoteRow;

export class Conversation {
  readonly rows: Row[] = [];
  readonly pendingPermissions = new Map<string, PermissionRow>();
  readonly pendingQuestions = new Map<string, QuestionRow>();
  lastSequence = 0;
  lastTime: string | undefined;
  ended = false;
  /** Set while only the events after this sequence are folded in (the older still being read). */
  partialFrom: number | undefined;
  /** Bumped by every change, for React to notice. */
  version = 0;

  #items = new Map<string, ItemRow>();
  /** A result's item id → the call row it was joined to. */
  #results = new Map<string, ItemRow>();
  #permissions = new Map<string, PermissionRow>();
  #questions = new Map<string, QuestionRow>();
  #rev = 0;

  applyAll(events: readonly SessionStreamEvent[]): void {
    for (const event of events) this.apply(event);
  }

  apply(event: SessionStreamEvent): void {
    this.version += 1;
    if (event.type === "gap") {
      this.#note("gap", `[… events ${event.from}–${event.to - 1} lost …]`, undefined, "warn", undefined);
      return;
    }
    if (event.sequence <= this.lastSequence) return; // already folded in
    this.lastSequence = event.sequence;
    this.lastTime = event.time;
    this.#apply(event);
  }

  #touch<T extends RowBase>(row: T): T {
    row.rev = ++this.#rev;
    return row;
  }

  #push<T extends Row>(row: T): T {
    this.rows.push(row);
    return row;
  }

  #note(type: NoteRow["type"], text: string, detail: string | undefined, tone: NoteRow["tone"], event: UniversalEvent | undefined): void {
    const key = event ? `${type}-${event.sequence}` : `${type}-${this.rows.length}-${this.lastSequence}`;
    this.#push<NoteRow>({ type, key, rev: ++this.#rev, time: event?.time, text, detail, tone });
  }

  #apply(event: UniversalEvent): void {
    switch (event.type) {
      case "session.started":
        this.ended = false;
        this.#note(
          "session",
          event.data.resumed ? `Session resumed (${event.data.agent})` : `Session started (${event.data.agent})`,
          undefined,
          "plain",
          event,
        );
        break;
      case "session.ended":
        this.ended = true;
        this.#note(
          "session",
          event.data.reason === "failed" ? "Session failed" : "Session ended",
          event.data.error ?? undefined,
          event.data.reason === "failed" ? "bad" : "plain",
          event,
        );
        for (const row of this.pendingPermissions.values()) this.#touch(row).reply = null;
        for (const row of this.pendingQuestions.values()) this.#touch(row).outcome = "cancelled";
        this.pendingPermissions.clear();
        this.pendingQuestions.clear();
        break;
      case "turn.started":
        this.#note("turn", `Turn ${event.data.turn}`, undefined, "plain", event);
        break;
      case "turn.ended":
        if (event.data.status !== "completed") {
          this.#note(
            "turn",
            `Turn ${event.data.turn} ${event.data.status}`,
            event.data.error ?? undefined,
            event.data.status === "failed" ? "bad" : "warn",
            event,
          );
        }
        break;
      case "item.started":
      case "item.completed":
        this.#item(event.data.item, event.type === "item.completed", event.time);
        break;
      case "item.delta":
        this.#delta(event.data.itemId, event.data.delta, event.time);
        break;
      case "permission.requested": {
        const row = this.#permissions.get(event.data.id) ?? this.#push<PermissionRow>({
          type: "permission",
          key: `permission-${event.data.id}`,
          rev: 0,
          time: event.time,
          request: event.data,
          reply: undefined,
        });
        row.request = event.data;
        this.#touch(row);
        this.#permissions.set(event.data.id, row);
        this.pendingPermissions.set(event.data.id, row);
        const call = event.data.itemId ? this.#items.get(event.data.itemId) : undefined;
        if (call) this.#touch(call).permission = row;
        break;
      }
      case "permission.resolved": {
        const row = this.#permissions.get(event.data.id);
        this.pendingPermissions.delete(event.data.id);
        if (row) {
          this.#touch(row).reply = event.data.reply ?? null;
          const call = row.request.itemId ? this.#items.get(row.request.itemId) : undefined;
          if (call) this.#touch(call);
        }
        break;
      }
      case "question.requested": {
        const row = this.#questions.get(event.data.id) ?? this.#push<QuestionRow>({
          type: "question",
          key: `question-${event.data.id}`,
          rev: 0,
          time: event.time,
          request: event.data,
          outcome: undefined,
          answers: undefined,
        });
        row.request = event.data;
        this.#touch(row);
        this.#questions.set(event.data.id, row);
        this.pendingQuestions.set(event.data.id, row);
        break;
      }
      case "question.resolved": {
        const row = this.#questions.get(event.data.id);
        this.pendingQuestions.delete(event.data.id);
        if (row) {
          this.#touch(row);
          row.outcome = event.data.outcome;
          row.answers = event.data.answers;
        }
        break;
      }
      case "error":
        this.#note("error", event.data.message, event.data.code ?? undefined, "bad", event);
        break;
      case "agent.unparsed":
        this.#note("unparsed", event.raw ?? "(no line)", event.data.reason ?? undefined, "warn", event);
        break;
      default: {
        // A type this inspector does not know yet is shown, not dropped.
        const unknown = event as { type: string; raw?: string | null };
        this.#note("unparsed", unknown.raw ?? JSON.stringify(event), `event ${unknown.type}`, "warn", event);
      }
    }
  }

  #item(item: Item, completed: boolean, time: string): void {
    // A result joined to its call updates the call's row.
    const joined = this.#results.get(item.id);
    if (joined?.result) {
      joined.result.item = { ...joined.result.item, ...definedFields(item) };
      if (typeof item.output === "string" && (completed || item.output.length >= joined.result.text.length)) joined.result.text = item.output;
      this.#touch(joined);
      return;
    }
    if (item.kind === "tool_result" && item.callId) {
      const call = this.#items.get(item.callId);
      if (call && call.item.kind === "tool_call" && !call.result) {
        call.result = { item, text: item.output ?? "" };
        this.#results.set(item.id, call);
        this.#touch(call);
        return;
      }
    }
    let row = this.#items.get(item.id);
    if (!row) {
      row = this.#push<ItemRow>({ type: "item", key: `item-${item.id}`, rev: 0, time, item, text: "" });
      this.#items.set(item.id, row);
    } else {
      row.item = { ...row.item, ...definedFields(item) };
    }
    // A result's text is a summary beside its output (the node agent's "`cmd` ended (exit 0)").
    const full = item.kind === "tool_result" ? item.output : item.kind === "file_change" ? (item.output ?? item.text) : item.text;
    if (typeof full === "string" && (completed || full.length >= row.text.length)) row.text = full;
    this.#touch(row);
  }

  #delta(itemId: string, delta: string, time: string): void {
    const joined = this.#results.get(itemId);
    if (joined?.result) {
      joined.result.text += delta;
      this.#touch(joined);
      return;
    }
    let row = this.#items.get(itemId);
    if (!row) {
      // A delta whose item.started came before what was read: an assistant message so far.
      row = this.#push<ItemRow>({
        type: "item",
        key: `item-${itemId}`,
        rev: 0,
        time,
        item: { id: itemId, kind: "message", role: "assistant", status: "inProgress" },
        text: "",
      });
      this.#items.set(itemId, row);
    }
    row.text += delta;
    this.#touch(row);
  }
}

function definedFields(item: Item): Partial<Item> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(item)) if (value !== undefined && value !== null) out[key] = value;
  return out as Partial<Item>;
}

/** A permission that approves a plan: ExitPlanMode, or any whose input carries a `plan`. */
export function planText(request: PermissionRequest): string | undefined {
  const plan = request.input?.plan;
  if (typeof plan === "string") return plan;
  if (request.tool === "ExitPlanMode") return typeof plan === "undefined" ? JSON.stringify(request.input, null, 2) : String(plan);
  return undefined;
}
