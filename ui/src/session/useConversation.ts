// Follows one session: its history read in pages, then its live events, folded into a
// Conversation once per animation frame however fast they come, and resumed from the
// last sequence after a dropped connection or a reload.
import type { AgentPlane, SessionStreamEvent } from "@agentplane/sdk";
import { useEffect, useRef, useState } from "react";
import { errorText, isAbort } from "../format";
import { Conversation } from "./model";

export type FollowState = "loading" | "live" | "ended" | "failed";

const PAGE = 10_000;

export function lastSequenceKey(sessionId: string): string {
  return `agentplane.lastSequence.${sessionId}`;
}

export function useConversation(plane: AgentPlane, sessionId: string, onBatch?: (events: SessionStreamEvent[]) => void) {
  const model = useRef<{ id: string; conversation: Conversation } | null>(null);
  if (model.current?.id !== sessionId) model.current = { id: sessionId, conversation: new Conversation() };
  const conversation = model.current.conversation;
  const [version, setVersion] = useState(0);
  const [state, setState] = useState<FollowState>("loading");
  const [error, setError] = useState<string | undefined>();
  const [attempt, setAttempt] = useState(0);
  const batchListener = useRef(onBatch);
  batchListener.current = onBatch;

  useEffect(() => {
    const stop = new AbortController();
    const signal = stop.signal;
    let queue: SessionStreamEvent[] = [];
    let frame = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;

    const flush = () => {
      cancelAnimationFrame(frame);
      clearTimeout(timer);
      frame = 0;
      timer = undefined;
      if (signal.aborted || queue.length === 0) return;
      const batch = queue;
      queue = [];
      conversation.applyAll(batch);
      remember();
      setVersion(conversation.version);
      batchListener.current?.(batch);
    };
    const enqueue = (event: SessionStreamEvent) => {
      queue.push(event);
      if (!frame) {
        frame = requestAnimationFrame(flush);
        // A hidden tab gets no animation frames: flush anyway, less often.
        timer = setTimeout(flush, 250);
      }
    };
    const remember = () => {
      try {
        sessionStorage.setItem(lastSequenceKey(sessionId), String(conversation.lastSequence));
      } catch {
        // storage full or denied: resuming within this page still works
      }
    };

    void (async () => {
      setError(undefined);
      try {
        if (conversation.lastSequence === 0) {
          setState("loading");
          // History, a page at a time (each page drawn as it comes), up to what exists now.
          let offset = 0;
          for (;;) {
            const page = await plane.sessions.readEvents(sessionId, { offset, limit: PAGE }, signal);
            if (page.gap) conversation.apply({ type: "gap", from: page.gap.from, to: page.gap.to });
            conversation.applyAll(page.events);
            const last = page.events.at(-1)?.sequence;
            if (last !== undefined) offset = last;
            remember();
            setVersion(conversation.version);
            batchListener.current?.(page.events);
            if (!page.hasMore || last === undefined) break;
          }
        }
        if (signal.aborted) return;
        // An ended session has nothing more to say, unless asked again (after a restart).
        if (conversation.ended && attempt === 0) {
          setState("ended");
          return;
        }
        setState("live");
        // Then what happens, from the last sequence folded in.
        for await (const event of plane.sessions.events(sessionId, { offset: conversation.lastSequence, signal })) {
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
  }, [plane, sessionId, conversation, attempt]);

  return { conversation, version, state, error, /** Follows again from the last sequence (after a failure, or a restart). */
    follow: () => setAttempt((n) => n + 1) };
}
