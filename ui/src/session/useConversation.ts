// Follows one session: its history read in pages, then its live events, folded into a
// Conversation once per animation frame however fast they come, and resumed from the
// last sequence after a dropped connection or a reload.
//
// A long session opens at its end: the newest TAIL events are read and shown first
// (and followed live from there), while the older ones are read in the background;
// once they are all in, the whole conversation is folded again, in order, and takes
// the place of the partial one.
import type { AgentPlane, SessionStreamEvent } from "@agentplane/sdk";
import { useEffect, useRef, useState } from "react";
import { errorText, isAbort } from "../format";
import { Conversation } from "./model";

export type FollowState = "loading" | "live" | "ended" | "failed";

/** Events per page read (the node agent answers at most 10 000). */
const PAGE = 2_500;
/** Per page read in the background: smaller, so that parsing one is never a long task. */
const BACKGROUND_PAGE = 1_000;
/** A session with more events than this opens with its newest TAIL first. */
const TAIL = 2_000;

export function lastSequenceKey(sessionId: string): string {
  return `agentplane.lastSequence.${sessionId}`;
}

export function useConversation(plane: AgentPlane, sessionId: string, onBatch?: (events: SessionStreamEvent[]) => void) {
  const model = useRef<{ id: string; conversation: Conversation } | null>(null);
  if (model.current?.id !== sessionId) model.current = { id: sessionId, conversation: new Conversation() };
  const [version, setVersion] = useState(0);
  const [state, setState] = useState<FollowState>("loading");
  const [error, setError] = useState<string | undefined>();
  const [attempt, setAttempt] = useState(0);
  const batchListener = useRef(onBatch);
  batchListener.current = onBatch;

  useEffect(() => {
    const stop = new AbortController();
    const signal = stop.signal;
    const current = () => (model.current as { conversation: Conversation }).conversation;
    let queue: SessionStreamEvent[] = [];
    let frame = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    /** While only the tail is shown: every event folded into it, to fold again after the older ones. */
    let sinceTail: SessionStreamEvent[] | undefined;

    const remember = () => {
      try {
        sessionStorage.setItem(lastSequenceKey(sessionId), String(current().lastSequence));
      } catch {
        // storage full or denied: resuming within this page still works
      }
    };
    const fold = (events: SessionStreamEvent[]) => {
      if (events.length === 0) return;
      current().applyAll(events);
      sinceTail?.push(...events);
      remember();
      setVersion(current().version);
      batchListener.current?.(events);
    };
    const flush = () => {
      cancelAnimationFrame(frame);
      clearTimeout(timer);
      frame = 0;
      timer = undefined;
      if (signal.aborted || queue.length === 0) return;
      const batch = queue;
      queue = [];
      fold(batch);
    };
    const enqueue = (event: SessionStreamEvent) => {
      queue.push(event);
      if (!frame) {
        frame = requestAnimationFrame(flush);
        // A hidden tab gets no animation frames: flush anyway, less often.
        timer = setTimeout(flush, 250);
      }
    };
    /** Pages of events after `offset`, up to `until` (inclusive) or the newest. */
    const read = async (offset: number, until: number, each: (events: SessionStreamEvent[]) => void, limit = PAGE) => {
      for (;;) {
        const page = await plane.sessions.readEvents(sessionId, { offset, limit }, signal);
        const events: SessionStreamEvent[] = [];
        if (page.gap) events.push({ type: "gap", from: page.gap.from, to: page.gap.to });
        for (const event of page.events) if (event.sequence <= until) events.push(event);
        each(events);
        const last = page.events.at(-1)?.sequence;
        if (last === undefined || !page.hasMore || last >= until) return;
        offset = last;
      }
    };
    /** The older events, read in the background into a whole conversation, which then replaces the tail. */
    const completeHistory = async (tailFrom: number) => {
      // Folded a page at a time as they come (each a short task), the tail after them.
      const whole = new Conversation();
      await read(0, tailFrom, (events) => whole.applyAll(events), BACKGROUND_PAGE);
      if (signal.aborted || !sinceTail) return;
      flush();
      whole.applyAll(sinceTail);
      sinceTail = undefined;
      (model.current as { conversation: Conversation }).conversation = whole;
      setVersion((v) => v + 1);
    };

    // A tail whose older events were never read in (a failure, or an earlier run of
    // this effect that was stopped) cannot be completed: read it all again.
    if (current().partialFrom !== undefined) {
      (model.current as { conversation: Conversation }).conversation = new Conversation();
    }

    void (async () => {
      setError(undefined);
      try {
        if (current().lastSequence === 0) {
          setState("loading");
          const { lastSequence } = await plane.sessions.get(sessionId, signal);
          if (lastSequence > TAIL + TAIL / 2) {
            const tailFrom = lastSequence - TAIL;
            current().partialFrom = tailFrom;
            sinceTail = [];
            await read(tailFrom, Number.POSITIVE_INFINITY, fold);
            completeHistory(tailFrom).catch((err: unknown) => {
              if (!signal.aborted && !isAbort(err)) setError(`the earlier events could not be read: ${errorText(err)}`);
            });
          } else {
            await read(0, Number.POSITIVE_INFINITY, fold);
          }
        }
        if (signal.aborted) return;
        // An ended session has nothing more to say, unless asked again (after a restart).
        if (current().ended && attempt === 0) {
          setState("ended");
          return;
        }
        setState("live");
        // Then what happens, from the last sequence folded in.
        for await (const event of plane.sessions.events(sessionId, { offset: current().lastSequence, signal })) {
          enqueue(event);
        }
        flush();
        if (!signal.aborted) setState("ended");
      } catch (err) {
        if (signal.aborted || isAbort(err)) return;
        flush();
        setError(errorText(err));
        setState("failed");
      }
    })();

    return () => {
      stop.abort();
      cancelAnimationFrame(frame);
      clearTimeout(timer);
    };
  }, [plane, sessionId, attempt]);

  return {
    conversation: model.current.conversation,
    version,
    state,
    error,
    /** Follows again from the last sequence (after a failure, or a restart). */
    follow: () => setAttempt((n) => n + 1),
  };
}
