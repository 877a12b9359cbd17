export interface paths {
    "/metrics": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Prometheus metrics of this node agent (OpenMetrics text): what exists now
         *     (processes, sessions, pending requests) and what happened since it started.
         */
        get: operations["metrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/acp": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The Agent Client Protocol over a WebSocket: one JSON-RPC message per text message.
         *     Sessions made here run on this node agent with the query's agent; they end when
         *     the socket closes (their events stay, for `session/load` on a later socket).
         *     Only a node agent serving TCP has it (one on a Unix socket answers `conflict`).
         */
        get: operations["acp_socket"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/acp/ticket": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** A short-lived single-use ticket to open `/v1/acp` without the token. */
        post: operations["acp_ticket"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/activity": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * What keeps this node agent busy now, and for how long nothing has: sessions in a
         *     turn (or preparing, installing, starting, with messages queued or a reply awaited),
         *     clients following a stream, and processes' output. A client that sends
         *     `X-Agentplane-Observer` on a stream is not counted. A controller suspends an idle
         *     sandbox by it (`idleTimeoutSeconds`).
         */
        get: operations["activity"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/agents": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The agents this node agent can drive. */
        get: operations["list_agents"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/agents/{agent}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One agent. */
        get: operations["get_agent"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/agents/{agent}/install": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Installs an agent's CLI from the npm registry (the user's npm configuration
         *     applies), verified against the registry's integrity. The same version again is a
         *     no-op (`alreadyInstalled`) unless `reinstall`. With `Accept: text/event-stream` the
         *     answer is an SSE stream of `install.progress` events ending in `install.completed`
         *     (an `InstallResult`) or `install.failed` (a problem document). The install goes on
         *     if the client goes away.
         */
        post: operations["install_agent"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/agents/{agent}/models": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The models a session's `model` may name, as far as the node agent knows them
         *     (`source` says from where; `note` what else the agent takes).
         */
        get: operations["agent_models"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/agents/{agent}/modes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The agent's own modes (`agentMode`) and the permission modes its driver accepts. */
        get: operations["agent_modes"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/auth/codes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * A one-time login code: 128 random bits, valid for 10 minutes, single use; at most
         *     32 are kept unexchanged (minting more drops the oldest). `agentplane up` prints a
         *     link carrying one (`/ui/#code=...`), `agentplane ui` another.
         */
        post: operations["issue_login_code"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/auth/exchange": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Exchanges a login code for a bearer token of the page's own (not the node agent's
         *     token), accepted like it until the node agent stops; the 64 newest are kept. Needs
         *     no token: the code is the credential. A code that is unknown, used or expired is
         *     `unauthorized`.
         */
        post: operations["exchange_login_code"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/events/sse": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Lifecycle events of all processes. Without `Last-Event-ID`, from now on;
         *     with it, everything after that id (or a `gap` event for what is no longer kept).
         *     An id from an earlier run of the node agent (past the newest) gets a `reset`
         *     event with id 0, then this run's events from the start.
         */
        get: operations["lifecycle_events"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/download": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * A tar stream of a directory (entries relative to it) or of one file: symlinks as
         *     symlinks, modes and times kept.
         */
        get: operations["download_tar"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/entries": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The entries of a directory, by name (symlinks as symlinks). */
        get: operations["list_entries"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/entry": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /** Deletes a file, a symlink (never what it points to) or a directory. */
        delete: operations["delete_entry"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/file": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * A file's bytes, streamed. `Range: bytes=a-b`, `a-` or `-n` answers 206 with that
         *     part; a range past the end answers 416.
         */
        get: operations["read_file"];
        /**
         * Writes a file from the raw request body: into a temporary file beside it, synced,
         *     then renamed over it, so a reader sees the old file or the new one, never a mix.
         *     An upload that fails or is cut off leaves nothing behind.
         */
        put: operations["write_file"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/mkdir": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Creates a directory and its missing parents: 201, or 200 when it already was one. */
        post: operations["make_directory"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/move": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Renames `from` to `to` (across directories and roots of one filesystem). */
        post: operations["move_entry"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/stat": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One entry, as `lstat` sees it: a symlink is reported with its target, not followed. */
        get: operations["stat_entry"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/upload": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Extracts a tar stream into the directory `path` (made when missing): modes, times,
         *     directories and symlinks kept. An entry that would land outside the root (an
         *     absolute name, `..`, through a symlink, a symlink pointing out) fails the request.
         */
        post: operations["upload_tar"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/fs/watch": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Changes under `path` as server-sent events (`created`, `modified`, `removed`,
         *     `renamed` with `from`; `gap` when events were lost), in order. The watch is in
         *     place when the response starts.
         */
        get: operations["watch"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/health": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Liveness; with the exchange of a login code, the only API route that needs no token. */
        get: operations["health"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/openapi.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** This document. */
        get: operations["openapi_json"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Processes in the order they were created. */
        get: operations["list_processes"];
        put?: never;
        /**
         * Starts a process, on a PTY when `pty` is given. With `sessionId` it feeds that
         *     session: a `tool_result` item there when it starts and when it exits (with its exit
         *     and the last 64 KiB of its output), that output prepended to the message of the
         *     session's next turn, and the process stopped when the session is ended.
         */
        post: operations["create_process"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One process, by id or else by tag (the newest with it). */
        get: operations["get_process"];
        put?: never;
        post?: never;
        /**
         * Stops a process: the stop signal to its whole group, SIGKILL after the timeout.
         *     Answers once it has exited. The record stays, as exited, unless `purge=true`.
         */
        delete: operations["delete_process"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}/connect": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The terminal WebSocket. Binary frames carry raw bytes both ways; text frames carry
         *     JSON [`ControlMessage`]s. Closing it never stops the process.
         */
        get: operations["connect"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}/input": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Writes to the program's input (text, or base64 bytes); `eof` closes it after. */
        post: operations["write_input"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}/output": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Retained output from a byte offset, for clients without WebSocket. With `wait`,
         *     waits for output past the offset (a long poll).
         */
        get: operations["read_output"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}/output/interleaved": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * stdout and stderr of a process without a terminal, chunk by chunk in the order
         *     the node agent received them, each with its stream, offset and time: what
         *     `kubectl logs` shows. `seq` and `nextSeq` page through it; with `wait`, waits for
         *     a chunk at or past `seq` (a long poll). Bytes a ring dropped are a `gap` on their
         *     frame; chunks whose order is no longer kept are the response's `gap`.
         */
        get: operations["read_interleaved_output"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}/resize": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Resizes the terminal; the program gets SIGWINCH. */
        post: operations["resize_process"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}/signal": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Sends a signal to the process group (or the terminal's foreground group). */
        post: operations["signal_process"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/processes/{id}/ticket": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** A short-lived single-use ticket to open the WebSocket without the token. */
        post: operations["issue_ticket"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Every resource of the store (Processes, Sessions, Sandboxes, templates and pools),
         *     with its phase, reason, conditions, file, and the node-agent id to open it by;
         *     and the files that were not taken. Served by `agentplane up` only: a plain node
         *     agent answers `not_found`.
         */
        get: operations["list_resources"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/sandboxes/{namespace}/{name}/wake": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Wakes a managed Sandbox suspended for being idle or by `agentplane suspend`, as a
         *     client of its endpoint would, and answers at once: the list (and its stream) shows
         *     it `Starting`, then `Ready`. One that is not suspended is left as it is
         *     (`woken: false`). One held by `spec.suspend: true` is not woken: only its file
         *     releases it.
         */
        post: operations["wake_sandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/resources/sse": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The whole list as an event `resources` (`id:` = its revision): one at once, then
         *     another each time something in it changes. Reconnecting needs no `Last-Event-ID`:
         *     every event is complete.
         */
        get: operations["resource_events"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Sessions in the order they were created, ended ones too. */
        get: operations["list_sessions"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["get_session"];
        put?: never;
        /**
         * Starts a session with an agent. The id is the caller's (letters, digits, `.`, `_`,
         *     `-`; at most 63), so that a restarted controller finds the session it started.
         */
        post: operations["create_session"];
        /**
         * Ends a session: `session.ended` is its last event. It stays listed, as ended;
         *     ending it again answers the same. Processes that feed it are stopped (their
         *     stop signal, then SIGKILL after the node agent's stop timeout) before the answer.
         */
        delete: operations["end_session"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/conversation": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The session's conversation as a tar, to continue it in another node agent (a new
         *     sandbox after its old one is gone): its record's history (counts, the agent's own
         *     id and what resuming needs, requests still open; never its environment or MCP
         *     servers), its event log, and the files its agent's CLI keeps the conversation in,
         *     below the agent's HOME. At most 64 MiB. Taken between turns, it is whole; taken
         *     during one, that turn runs again where it is continued.
         */
        get: operations["session_conversation"];
        /**
         * Stages a conversation another node agent packed (`GET .../conversation`) for the
         *     session of this id, which is not here yet: creating it (`POST /v1/sessions/{id}`,
         *     with the settings it is to have) then continues that conversation. Its counts go
         *     on (a declared message is taken once across both), its events after the newest
         *     the tar holds and after `after`, and the agent resumes its own conversation from
         *     its files, written into its HOME where no file of that name is. The tar is checked
         *     whole before it is kept: only `session/session.json` (naming this session),
         *     `session/events.jsonl` and regular files below `home/`, nothing else; staged again,
         *     the newer replaces the older.
         */
        put: operations["stage_conversation"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/diff": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The session's workspace against the commit it was cloned at, as a unified diff
         *     (`git diff`, renames detected): changes in the working tree, new commits, and
         *     untracked files as new files (ignored ones not). Streamed as git writes it, never
         *     held whole; cut after 10 minutes. Empty when nothing changed.
         */
        get: operations["session_diff"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** Events after `offset` (exclusive), oldest first. */
        get: operations["session_events"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/events/sse": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * Events over SSE: `id:` is the sequence, `event:` the type, `data:` the envelope.
         *     Starts after `Last-Event-ID` or else `offset` (default 0: from the first event); a
         *     `gap` event (`{from, to}`, `to` exclusive) names sequences that are lost. Ends after
         *     `session.ended`.
         */
        get: operations["session_events_sse"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/interrupt": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Cuts the turn under way short, as a person pressing Escape in the agent's own
         *     interface: the agent is stopped in the middle of it, the turn ends `interrupted`
         *     (`turn.ended`), its pending permission requests and questions are cancelled, and
         *     the agent starts again in the same conversation (`session.started` with
         *     `resumed: true`), ready for the next message; messages queued behind the turn run
         *     after it as usual. With no turn under way nothing changes. The answer is the
         *     session as it is (the turn ends a moment later: follow the events).
         */
        post: operations["interrupt_session"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/messages": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Sends a message: it runs as the next turn, after any before it. Output of
         *     processes that fed the session (`sessionId` on `POST /v1/processes`) and exited
         *     since the last turn started is delivered to the agent before the message, as
         *     ``Output of `CMD` (exit 0):`` and a fenced block each, then a blank line; the
         *     turn's user message item keeps the message as sent.
         */
        post: operations["send_message"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/permissions/{pid}/reply": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Answers a permission request. The same reply again answers the same; a different
         *     reply to a request already resolved is a `conflict`.
         */
        post: operations["reply_permission"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/questions/{qid}/reject": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Declines to answer a question. */
        post: operations["reject_question"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/questions/{qid}/reply": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Answers a question: one list of answers per question asked. */
        post: operations["reply_question"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sessions/{id}/restart": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Restarts the session's agent in the same conversation, with a new environment when
         *     the body gives one (`{"env": {...}}`; no body keeps the one it has).
         * @description A **live** session (`idle`, `running`, `awaitingInput`, or still starting): the
         *     agent is stopped between turns (after the one under way, before any queued one)
         *     and started again, resumed by its own id (`session.started` with `resumed: true`);
         *     asked twice before that, it restarts once. The answer is the session as it is.
         *
         *     A **failed** session starts again: its event log reopens (`session.started` with
         *     `resumed` follows; sequences continue), the turn under way when it failed goes on,
         *     then the messages accepted before it failed; the state is `starting` (or
         *     `installing`) and `messagesReceived` is unchanged. Asked twice, it starts once
         *     (the second is a `conflict`). An **ended** session is a `conflict`.
         */
        post: operations["restart_session"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /** @description What keeps a node agent busy, and how long nothing has (`GET /v1/activity`). */
        ActivityReport: {
            /** @description What is going on now, one line each; empty when nothing is. */
            busy: string[];
            /**
             * Format: int64
             * @description Whole seconds since something last went on (0 while busy).
             */
            idleSeconds: number;
        };
        /** @description What a driver can do; clients hide what an agent does not offer. */
        AgentCapabilities: {
            /**
             * @description Takes MCP servers (`mcpServers` of a session); an agent that cannot refuses a
             *     session that names any (`mcp_not_supported`).
             */
            mcp?: boolean;
            /** @description Asks before running tools (`permission.requested`). */
            permissions: boolean;
            /** @description Asks the user questions (`question.requested`). */
            questions: boolean;
            /** @description Continues a conversation after the node agent restarts. */
            resume: boolean;
            /** @description Streams text as `item.delta` events before `item.completed`. */
            streamingDeltas: boolean;
        };
        /** @description An agent the node agent can drive. */
        AgentInfo: {
            capabilities: components["schemas"]["AgentCapabilities"];
            /** @description Whether the credentials it needs are available to it. */
            credentialsAvailable: boolean;
            /** @description `claude`, `codex`, ..., `mock`. */
            id: string;
            installed: boolean;
            /** @description The installed executable; `null` for a built-in agent. */
            path?: string | null;
            version?: string | null;
        };
        AgentList: {
            agents: components["schemas"]["AgentInfo"][];
        };
        /** @description One mode an agent has (`agentMode` of a session). */
        AgentModeInfo: {
            description: string;
            id: string;
        };
        /** @description `GET /v1/agents/{agent}/models`. */
        AgentModels: {
            agent: string;
            /** @description The model the agent picks when a session names none, when known. */
            defaultModel?: string | null;
            models: components["schemas"]["ModelInfo"][];
            /** @description What else `model` may name. */
            note: string;
            /**
             * @description Where the list comes from (`catalog`: what this node agent knows of the
             *     agent's pinned version, not asked of the agent or its provider).
             */
            source: string;
        };
        /** @description `GET /v1/agents/{agent}/modes`. */
        AgentModes: {
            agent: string;
            /** @description The values a session's `agentMode` may take (empty: the agent has none). */
            agentModes: components["schemas"]["AgentModeInfo"][];
            /** @description The mode a session gets when it names none. */
            defaultAgentMode?: string | null;
            /** @description The `permissionMode`s this agent's driver accepts; others answer `mode_not_supported`. */
            permissionModes: components["schemas"]["PermissionMode"][];
        };
        /** @description Answer of `POST /v1/auth/exchange`. */
        BrowserToken: {
            /**
             * @description A bearer token of the page's own (not the node agent's `--token`), accepted
             *     until the node agent stops; the 64 newest are kept.
             */
            token: string;
        };
        /** @description A file that differs from the workspace's commit. */
        ChangedFile: {
            /** @description For a renamed file: where it was. */
            from?: string | null;
            /** @description Relative to the workspace. */
            path: string;
            status: components["schemas"]["FileChangeStatus"];
        };
        /** @description JSON control messages of the terminal WebSocket (text frames), both directions. */
        ControlMessage: {
            /** Format: int32 */
            cols: number;
            /** Format: int32 */
            rows: number;
            /** @enum {string} */
            type: "resize";
        } | {
            signal: string;
            /** @enum {string} */
            type: "signal";
        } | {
            /** Format: int64 */
            offset: number;
            /** @enum {string} */
            type: "ack";
        } | {
            /** Format: int64 */
            offset: number;
            /** @enum {string} */
            type: "ready";
        } | {
            /** Format: int64 */
            from: number;
            /** Format: int64 */
            to: number;
            /** @enum {string} */
            type: "gap";
        } | {
            /** Format: int32 */
            exitCode?: number | null;
            signal?: string | null;
            /** @enum {string} */
            type: "exit";
        } | {
            message: string;
            /** @enum {string} */
            type: "error";
        };
        /** @description Answer of `PUT /v1/sessions/{id}/conversation`. */
        ConversationStaged: {
            /**
             * Format: int64
             * @description The tar's size.
             */
            bytes: number;
            /**
             * Format: int64
             * @description The session's events will go on after this sequence.
             */
            lastSequence: number;
        };
        /** @description Body of `POST /v1/processes`. */
        CreateProcessRequest: {
            /**
             * @description Caller's metadata kept with the process and returned as given (at most 64
             *     entries, 16 KiB in all). A controller records here which resource, and which
             *     version of its spec, a process was started for.
             */
            annotations?: {
                [key: string]: string;
            };
            args?: string[];
            /** @description The program, found on `PATH` unless it contains a `/`. */
            command: string;
            /** @description Working directory; the node agent's own when absent. */
            cwd?: string | null;
            /** @description Variables added to (or overriding) the node agent's environment. */
            env?: {
                [key: string]: string;
            };
            /**
             * @description A stable id chosen by the caller (letters, digits, `.`, `_`, `-`; at most 63).
             *     Omit it and the node agent picks one. Controllers derive it from a resource uid
             *     so that a restarted controller finds what it started.
             */
            id?: string | null;
            label?: string | null;
            pty?: null | components["schemas"]["PtySize"];
            /**
             * @description A session this process feeds (`session_not_found` if there is none; `conflict`
             *     if it has ended). The session gets an `item.started` of kind `tool_result`
             *     (source `daemon`, status `inProgress`) when the process starts and the same
             *     item `item.completed` when it exits: `input` holds `command`, `args`,
             *     `processId`, `exitCode` and `signal`; `output` the last 64 KiB of its output
             *     (stdout, then stderr under a `--- stderr ---` line; a first line saying how
             *     many bytes were cut when there was more). The next turn the session starts
             *     gets that output prepended to the message delivered to the agent, as
             *     ``Output of `CMD` (exit 0):`` and a fenced block; the turn's user message item
             *     keeps the person's own text. Ending the session stops its processes.
             */
            sessionId?: string | null;
            /** @description Keep stdin open for a process without a PTY (a PTY always has input). */
            stdin?: boolean;
            tag?: string | null;
        };
        /** @description Body of `POST /v1/sessions/{id}`. */
        CreateSessionRequest: {
            /** @description An agent id from `GET /v1/agents`. */
            agent: string;
            /** @description The agent's own mode (e.g. `build`, `plan`); absent means its default. */
            agentMode?: string | null;
            /** @description A pinned version; absent means the installed one. */
            agentVersion?: string | null;
            /**
             * @description Variables for the agent's environment. Kept in the node agent's data directory
             *     (readable by its user only) so that the session can resume; never echoed back.
             */
            env?: {
                [key: string]: string;
            };
            /**
             * @description What people read in the node agent's log lines for this session, beside its id
             *     (a controller sets `Session/<namespace>/<name>`). At most 512 bytes, no control
             *     characters.
             */
            label?: string | null;
            /**
             * @description MCP servers the agent is given, written into its own configuration the way it
             *     takes them (stdio: `command`; HTTP: `url`). Values are resolved (no secret
             *     references); kept with `env` and, like it, never echoed back or logged.
             */
            mcpServers?: components["schemas"]["McpServer"][];
            model?: string | null;
            permissionMode?: null | components["schemas"]["PermissionMode"];
            variant?: string | null;
            /** @description An existing directory; the node agent's own when absent. */
            workingDir?: string | null;
            workspace?: null | components["schemas"]["WorkspaceRequest"];
        };
        /** @enum {string} */
        EndReason: "requested" | "failed";
        /** @description What happened: the `type` of the envelope and its `data` object. */
        EventData: {
            /** @description The agent is ready for messages (again, after a node agent restart, when `resumed`). */
            data: {
                agent: string;
                agentSessionId?: string | null;
                resumed?: boolean;
            };
            /** @enum {string} */
            type: "session.started";
        } | {
            /** @description The last event of a session. */
            data: {
                error?: string | null;
                reason: components["schemas"]["EndReason"];
            };
            /** @enum {string} */
            type: "session.ended";
        } | {
            data: {
                /**
                 * Format: int64
                 * @description Turns of this session, counted from 1.
                 */
                turn: number;
            };
            /** @enum {string} */
            type: "turn.started";
        } | {
            data: {
                error?: string | null;
                status: components["schemas"]["TurnStatus"];
                /** Format: int64 */
                turn: number;
                usage?: null | components["schemas"]["Usage"];
            };
            /** @enum {string} */
            type: "turn.ended";
        } | {
            data: {
                item: components["schemas"]["Item"];
            };
            /** @enum {string} */
            type: "item.started";
        } | {
            /** @description More text of an item that is under way. */
            data: {
                delta: string;
                itemId: string;
            };
            /** @enum {string} */
            type: "item.delta";
        } | {
            data: {
                item: components["schemas"]["Item"];
            };
            /** @enum {string} */
            type: "item.completed";
        } | {
            data: components["schemas"]["PermissionRequest"];
            /** @enum {string} */
            type: "permission.requested";
        } | {
            data: {
                id: string;
                reply?: null | components["schemas"]["PermissionReply"];
            };
            /** @enum {string} */
            type: "permission.resolved";
        } | {
            data: components["schemas"]["QuestionRequest"];
            /** @enum {string} */
            type: "question.requested";
        } | {
            data: {
                /** @description The answers, when `outcome` is `answered`: one list per question. */
                answers?: string[][] | null;
                id: string;
                outcome: components["schemas"]["QuestionOutcome"];
            };
            /** @enum {string} */
            type: "question.resolved";
        } | {
            data: {
                code?: string | null;
                message: string;
            };
            /** @enum {string} */
            type: "error";
        } | {
            /** @description A native line no converter understood; the line itself is the envelope's `raw`. */
            data: {
                reason?: string | null;
            };
            /** @enum {string} */
            type: "agent.unparsed";
        };
        /**
         * @description Who produced an event: the agent (converted from its output), or the node agent
         *     itself (session lifecycle, replies from clients, user messages).
         * @enum {string}
         */
        EventSource: "agent" | "daemon";
        /**
         * @description The type of an event, as its name on the wire (`item.delta`, ...).
         * @enum {string}
         */
        EventType: "session.started" | "session.ended" | "turn.started" | "turn.ended" | "item.started" | "item.delta" | "item.completed" | "permission.requested" | "permission.resolved" | "question.requested" | "question.resolved" | "error" | "agent.unparsed";
        /** @description Body of `POST /v1/auth/exchange`. */
        ExchangeCodeRequest: {
            /** @description A code from `POST /v1/auth/codes` (or the `inspector:` line `agentplane up` prints). */
            code: string;
        };
        /** @enum {string} */
        FileChangeStatus: "added" | "modified" | "deleted" | "renamed";
        /**
         * @description Why a file of the watched folder was not taken (it keeps its resources at their
         *     last good spec).
         */
        FileError: {
            /**
             * Format: int64
             * @description 1-based, when the error has a place.
             */
            column?: number | null;
            /** @description Relative to the watched folder. */
            file: string;
            /**
             * Format: int64
             * @description 1-based, when the error has a place.
             */
            line?: number | null;
            message: string;
        };
        /** @description Answer of `GET /v1/fs/entries`. */
        FsEntries: {
            /** @description By name. */
            entries: components["schemas"]["FsEntry"][];
            /** @description The directory listed, absolute. */
            path: string;
        };
        /** @description One file, directory or symlink. */
        FsEntry: {
            /**
             * Format: int32
             * @description The permission bits (`0o644` is 420).
             */
            mode: number;
            /** @description Last modification, RFC 3339. */
            mtime: string;
            /** @description The last component of `path` (empty for a root). */
            name: string;
            /** @description Absolute and inside a root: how a client addresses it. */
            path: string;
            /**
             * Format: int64
             * @description In bytes (a symlink's: the length of its target).
             */
            size: number;
            /** @description The symlink's target as stored, for symlinks only. */
            target?: string | null;
            type: components["schemas"]["FsEntryType"];
        };
        /**
         * @description What a directory entry is, as `lstat` sees it: a symlink is never followed.
         * @enum {string}
         */
        FsEntryType: "file" | "directory" | "symlink" | "other";
        /** @description One event of `GET /v1/fs/watch`. */
        FsEvent: {
            /** @description The old path of a rename. */
            from?: string | null;
            /**
             * Format: int64
             * @description For a gap: how many events were dropped (0 when the kernel's count is unknown).
             */
            missed?: number | null;
            /** @description Absolute (for a gap: the watched path). */
            path: string;
            type: components["schemas"]["FsEventType"];
        };
        /**
         * @description What happened to a watched path.
         * @enum {string}
         */
        FsEventType: "created" | "modified" | "removed" | "renamed" | "gap";
        /** @description Body of `POST /v1/fs/move`. */
        FsMoveRequest: {
            from: string;
            /** @description Replace what is at `to` (a file, a symlink or an empty directory). */
            overwrite?: boolean;
            to: string;
        };
        /** @description Answer of `POST /v1/fs/upload`. */
        FsUploadResult: {
            /**
             * Format: int64
             * @description Bytes of file content written.
             */
            bytes: number;
            /**
             * Format: int64
             * @description Tar entries extracted (files, directories, symlinks, hard links).
             */
            entries: number;
        };
        /** @description A range of output that was lost to the client: overwritten before it was read. */
        Gap: {
            /** Format: int64 */
            from: number;
            /** Format: int64 */
            to: number;
        };
        /** @description How to authenticate a clone. Neither secret is ever put in a command line or a URL. */
        GitCredentials: {
            /**
             * @description An SSH private key (OpenSSH or PEM text), written to a private file for the
             *     clone's `ssh -i` and removed after it.
             */
            sshPrivateKey?: string | null;
            /**
             * @description An HTTPS token, sent as HTTP basic authentication (`username`:`token`) through
             *     git's `http.extraHeader`, set in git's environment.
             */
            token?: string | null;
            /**
             * @description The user name sent with `token` (default `x-access-token`, which GitHub takes;
             *     GitLab takes `oauth2`).
             */
            username?: string | null;
        };
        /** @description A git repository to clone with the `git` CLI. */
        GitSource: {
            credentials?: null | components["schemas"]["GitCredentials"];
            /**
             * Format: int32
             * @description A shallow clone of this many commits.
             */
            depth?: number | null;
            /**
             * @description A branch, a tag or a commit sha (with `depth`: a branch, a tag or a full sha);
             *     the repository's default branch when absent.
             */
            ref?: string | null;
            /**
             * @description What `git clone` takes: `https://...`, `ssh://...`, `git@host:path`, `file://...`
             *     (not `ext::`). Put no credentials in it (a password in it is shown as `***`, but
             *     git keeps the URL in the clone's config): use `credentials`.
             */
            url: string;
        };
        Health: {
            status: string;
            version: string;
        };
        InputRequest: {
            base64?: boolean;
            /** @description Text to write, or base64 when `base64` is true. */
            data?: string;
            /** @description Close stdin after writing (`^D` on a PTY). */
            eof?: boolean;
        };
        /**
         * @description Where an install is.
         * @enum {string}
         */
        InstallPhase: "resolving" | "downloading" | "verifying" | "done";
        /**
         * @description One `install.progress` event. The counts are totals so far, so a client that
         *     misses one loses nothing.
         */
        InstallProgress: {
            agent: string;
            /** @description What npm just did (a package name), when known. */
            message?: string | null;
            /**
             * Format: int64
             * @description Package documents fetched from the registry.
             */
            packagesResolved: number;
            phase: components["schemas"]["InstallPhase"];
            /**
             * Format: int64
             * @description Tarballs fetched or taken from npm's cache (npm does not say how many to expect).
             */
            tarballsFetched: number;
            version: string;
        };
        /**
         * @description Body of `POST /v1/agents/{agent}/install` (all optional: an empty body installs
         *     the pinned version).
         */
        InstallRequest: {
            /** @description Install again even when this version is there (swapped in once complete). */
            reinstall?: boolean;
            /** @description An exact npm version (`2.1.330`); default: the version this node agent pins. */
            version?: string | null;
        };
        /** @description What an install did (`install.completed` over SSE). */
        InstallResult: {
            agent: string;
            /** @description The version was there already: nothing was fetched. */
            alreadyInstalled: boolean;
            /**
             * @description npm's integrity of the agent's package (`sha512-...`), checked against the
             *     registry's; `null` for an install made before integrity was recorded.
             */
            integrity?: string | null;
            /** @description The installed executable. */
            path: string;
            version: string;
        };
        /** @description stdout and stderr of a process without a terminal, chunk by chunk in the order they arrived. */
        InterleavedOutput: {
            encoding: components["schemas"]["OutputEncoding"];
            /** @description True when both streams are closed and `nextSeq` is past their last chunk. */
            eof: boolean;
            frames: components["schemas"]["OutputFrame"][];
            gap?: null | components["schemas"]["Gap"];
            /**
             * Format: int64
             * @description The `seq` to ask for next.
             */
            nextSeq: number;
            status: components["schemas"]["ProcessStatus"];
        };
        /** @description One unit of a conversation: a message, a tool call and its result, reasoning, ... */
        Item: {
            /** @description For a tool result: the call it answers. */
            callId?: string | null;
            /** @description Unique within the session; `item.delta` and `item.completed` name it. */
            id: string;
            /** @description For a tool call: its arguments. */
            input?: Record<string, unknown> | null;
            kind: components["schemas"]["ItemKind"];
            /** @description For a tool result: what the tool printed. */
            output?: string | null;
            /** @description For a file change: the file. */
            path?: string | null;
            role?: null | components["schemas"]["Role"];
            status?: null | components["schemas"]["ItemStatus"];
            text?: string | null;
            /** @description For a tool call: the tool's name. */
            tool?: string | null;
        };
        /** @enum {string} */
        ItemKind: "message" | "tool_call" | "tool_result" | "reasoning" | "file_change" | "status";
        /** @enum {string} */
        ItemStatus: "inProgress" | "completed" | "failed" | "denied";
        /** @description One entry of `GET /v1/events/sse`; the SSE `id:` is `sequence`. */
        LifecycleEvent: {
            process: components["schemas"]["ProcessInfo"];
            /** Format: int64 */
            sequence: number;
            /** Format: date-time */
            time: string;
            type: components["schemas"]["LifecycleEventType"];
        };
        /** @enum {string} */
        LifecycleEventType: "process.created" | "process.updated" | "process.exited" | "process.deleted";
        /** @description Answer of `POST /v1/auth/codes`: a one-time code for `POST /v1/auth/exchange`. */
        LoginCode: {
            /**
             * @description 128 random bits as hex: single use. Meant for a URL fragment (`/ui/#code=...`),
             *     which no browser sends to a server.
             */
            code: string;
            /** Format: date-time */
            expiresAt: string;
        };
        /**
         * @description One MCP server of a session: exactly one of `command` (a stdio server the agent
         *     starts, with `args` and `env`) or `url` (a streamable HTTP server, with `headers`).
         */
        McpServer: {
            args?: string[];
            command?: string | null;
            /** @description The stdio server's environment (added to what the agent passes it). */
            env?: {
                [key: string]: string;
            };
            /** @description Headers of every request to the HTTP server (`Authorization`, ...). */
            headers?: {
                [key: string]: string;
            };
            /**
             * @description Unique in the session: letters, digits, `_` and `-`, at most 64 (agents name the
             *     server's tools after it, e.g. Claude's `mcp__<name>__<tool>`).
             */
            name: string;
            /** @description `http://` or `https://`: a server speaking MCP's streamable HTTP transport. */
            url?: string | null;
        };
        /** @description One model a session's `model` may name. */
        ModelInfo: {
            description: string;
            id: string;
        };
        OutputChunk: {
            data: string;
            encoding: components["schemas"]["OutputEncoding"];
            /** @description True when the stream is closed and `nextOffset` is its end: nothing more will come. */
            eof: boolean;
            gap?: null | components["schemas"]["Gap"];
            /**
             * Format: int64
             * @description The offset to ask for next.
             */
            nextOffset: number;
            /**
             * Format: int64
             * @description The offset of the first byte of `data`.
             */
            offset: number;
            status: components["schemas"]["ProcessStatus"];
            stream: components["schemas"]["OutputStream"];
        };
        /** @enum {string} */
        OutputEncoding: "utf8" | "base64";
        /** @description A chunk of stdout or stderr as the node agent received it. */
        OutputFrame: {
            data: string;
            gap?: null | components["schemas"]["Gap"];
            /**
             * Format: int64
             * @description The offset in `stream` of the first byte of `data`.
             */
            offset: number;
            /**
             * Format: int64
             * @description Arrival order across both streams.
             */
            seq: number;
            stream: components["schemas"]["OutputStream"];
            /**
             * Format: date-time
             * @description When the node agent received it; never earlier than the frame before it.
             */
            time: string;
        };
        /** @enum {string} */
        OutputStream: "stdout" | "stderr" | "pty";
        /** @enum {string} */
        PermissionMode: "default" | "plan" | "bypass";
        /**
         * @description A client's answer to a permission request.
         * @enum {string}
         */
        PermissionReply: "once" | "always" | "reject";
        /** @description Body of `POST /v1/sessions/{id}/permissions/{pid}/reply`. */
        PermissionReplyRequest: {
            reply: components["schemas"]["PermissionReply"];
        };
        /** @description The agent asks before running a tool. */
        PermissionRequest: {
            /** @description Unique within the session; the `{pid}` of the reply route. */
            id: string;
            input: Record<string, unknown>;
            /** @description The tool-call item this request is about. */
            itemId?: string | null;
            /** @description The replies the agent accepts. */
            options: components["schemas"]["PermissionReply"][];
            tool: string;
        };
        /** @description An RFC 7807 problem document. */
        Problem: {
            detail: string;
            /** Format: int32 */
            status: number;
            title: string;
            /** @description A stable URN, `urn:agentplane:error:<code>`. */
            type: string;
        };
        /** @description A process as the node agent knows it. */
        ProcessInfo: {
            annotations?: {
                [key: string]: string;
            };
            args: string[];
            command: string;
            /** Format: date-time */
            createdAt: string;
            cwd: string;
            /** Format: int32 */
            exitCode?: number | null;
            /** Format: date-time */
            exitedAt?: string | null;
            id: string;
            label?: string | null;
            /**
             * Format: int64
             * @description Bytes of output so far: the terminal's for a PTY, stdout's otherwise.
             */
            outputOffset: number;
            /** Format: int32 */
            pid: number;
            /** @description Whether it runs on a pseudo-terminal. */
            pty: boolean;
            /** @description The session this process feeds, if any (see `CreateProcessRequest.sessionId`). */
            sessionId?: string | null;
            /** @description The signal that ended it, if one did (e.g. `SIGTERM`). */
            signal?: string | null;
            size?: null | components["schemas"]["PtySize"];
            status: components["schemas"]["ProcessStatus"];
            /**
             * Format: int64
             * @description Bytes written to stderr so far (processes without a PTY).
             */
            stderrOffset?: number | null;
            /** @description Whether its stdin is open for input. */
            stdin: boolean;
            tag?: string | null;
        };
        ProcessList: {
            processes: components["schemas"]["ProcessInfo"][];
        };
        /** @enum {string} */
        ProcessStatus: "running" | "exited";
        PtySize: {
            /** Format: int32 */
            cols: number;
            /** Format: int32 */
            rows: number;
        };
        Question: {
            header?: string | null;
            /** @description Whether more than one option may be chosen. */
            multiSelect?: boolean;
            /** @description Suggested answers (a client may offer free text as well). */
            options?: string[];
            question: string;
        };
        /** @enum {string} */
        QuestionOutcome: "answered" | "rejected" | "cancelled";
        /** @description Body of `POST /v1/sessions/{id}/questions/{qid}/reply`: one list of answers per question. */
        QuestionReplyRequest: {
            answers: string[][];
        };
        /** @description The agent asks the user one or more questions at once. */
        QuestionRequest: {
            /** @description Unique within the session; the `{qid}` of the reply and reject routes. */
            id: string;
            questions: components["schemas"]["Question"][];
        };
        /** @description A condition of a resource's status, in the Kubernetes `metav1.Condition` shape. */
        ResourceCondition: {
            /**
             * Format: date-time
             * @description RFC 3339: when `status` last changed.
             */
            lastTransitionTime: string;
            message: string;
            reason: string;
            /** @description `True`, `False` or `Unknown`. */
            status: string;
            /** @description `Ready`, `Valid`, `RepliesAccepted`, ... */
            type: string;
        };
        /**
         * @description The kinds of resource a store holds.
         * @enum {string}
         */
        ResourceKind: "Process" | "Session" | "Sandbox" | "SandboxTemplate" | "SandboxWarmPool";
        /**
         * @description Answer of `GET /v1/resources`, and the data of each `resources` event of
         *     `GET /v1/resources/sse`: everything, each time.
         */
        ResourceList: {
            /** @description The files that were not taken, by file. */
            fileErrors: components["schemas"]["FileError"][];
            /** @description By kind, namespace and name. */
            resources: components["schemas"]["ResourceView"][];
            /**
             * Format: int64
             * @description Goes up with every change the store records (from 0 at each start of `up`).
             */
            revision: number;
        };
        /** @description One resource of the store, with what a page needs to list it and open it. */
        ResourceView: {
            conditions: components["schemas"]["ResourceCondition"][];
            /**
             * @description The YAML file that declares it, relative to the watched folder; absent for what
             *     the store made itself (sandboxes of a template).
             */
            file?: string | null;
            kind: components["schemas"]["ResourceKind"];
            /** @description The message of the condition `reason` comes from, else that of `Ready`. */
            message?: string | null;
            name: string;
            namespace: string;
            /**
             * @description As `agentplane get` shows it: the status's phase, `Pending` before there is
             *     one, `Terminating` while being cleaned up, `External` for a Sandbox with an
             *     endpoint; absent for kinds without a phase (templates, pools).
             */
            phase?: string | null;
            /** @description Process: its id on its sandbox's node agent (`/v1/processes/{id}`, its terminal). */
            processId?: string | null;
            /**
             * @description Why it is not where it should be, in one word (`get`'s REASON column:
             *     `BackOff`, `EnvNotResolved`, `InvalidSpec`, ...); absent when all is well.
             */
            reason?: string | null;
            /**
             * @description Process and Session: the Sandbox it runs on (`local`: the node agent serving
             *     this list; `processId` and `sessionId` are ids on that sandbox's node agent).
             */
            sandbox?: string | null;
            /** @description Session: its id on its sandbox's node agent (`/v1/sessions/{id}`, its events). */
            sessionId?: string | null;
            /** @description The spec as the store took it (what `agentplane get -o json` shows). */
            spec?: Record<string, unknown> | null;
            /** @description The whole status as the store records it. */
            status?: Record<string, unknown> | null;
            /** @description Given by the store when it first saw the resource; stable while it lives. */
            uid?: string | null;
            /**
             * Format: date-time
             * @description RFC 3339: the latest time the resource records (created, a condition's
             *     transition, started, exited, deleted).
             */
            updatedAt?: string | null;
        };
        /**
         * @description Body of `POST /v1/sessions/{id}/restart` (optional: no body restarts with the same
         *     environment).
         */
        RestartSessionRequest: {
            /**
             * @description The agent's environment from now on, in place of the one it was created with
             *     (an env file that changed). Kept like `env` at creation, never echoed back.
             */
            env?: {
                [key: string]: string;
            } | null;
        };
        /** @enum {string} */
        Role: "user" | "assistant" | "system";
        /** @description Answer of `POST /v1/resources/sandboxes/{namespace}/{name}/wake`. */
        SandboxWake: {
            /**
             * @description True when the sandbox was suspended and is now asked to wake: the resources'
             *     stream shows it `Starting`, then `Ready`. False when it was not suspended
             *     (awake, starting, failed): nothing was done.
             */
            woken: boolean;
        };
        /** @description Body of `POST /v1/sessions/{id}/messages`. */
        SendMessageRequest: {
            /**
             * Format: int64
             * @description For a controller: this message's index in the resource's `spec.messages`. Each
             *     index is taken once and in order: one already taken changes nothing (the answer
             *     is the session as it is), one past the next is refused (409). A message without
             *     it (a person, a program, the inspector) is counted apart.
             */
            declared?: number | null;
            message: string;
        };
        /** @description Answer of `GET /v1/sessions/{id}/events`. */
        SessionEvents: {
            events: components["schemas"]["UniversalEvent"][];
            gap?: null | components["schemas"]["Gap"];
            /** @description Whether events past the last one returned exist already. */
            hasMore: boolean;
        };
        /** @description A session as the node agent knows it. */
        SessionInfo: {
            agent: string;
            agentMode?: string | null;
            /** @description The agent's own id of the conversation, once it has one. */
            agentSessionId?: string | null;
            agentVersion?: string | null;
            /** Format: date-time */
            createdAt: string;
            /**
             * Format: int64
             * @description Of those, the declared ones (sent with `declared`, by a controller from a
             *     resource's `spec.messages`); the rest came through the API without it.
             */
            declaredMessagesReceived?: number;
            /** Format: date-time */
            endedAt?: string | null;
            error?: string | null;
            id: string;
            /** @description The label it was created with, if any. */
            label?: string | null;
            /**
             * Format: int64
             * @description The sequence of the newest event (0 when none).
             */
            lastSequence: number;
            /**
             * Format: int64
             * @description Messages accepted so far (each runs as one turn, in order).
             */
            messagesReceived: number;
            model?: string | null;
            pendingPermissions: components["schemas"]["PermissionRequest"][];
            pendingQuestions: components["schemas"]["QuestionRequest"][];
            permissionMode: components["schemas"]["PermissionMode"];
            state: components["schemas"]["SessionState"];
            /** @description Why the newest finished turn failed; absent when it succeeded (or none ended yet). */
            turnError?: string | null;
            /** Format: int64 */
            turnsCompleted: number;
            /**
             * Format: int64
             * @description Turns that ended failed, among `turnsCompleted`.
             */
            turnsFailed?: number;
            /**
             * @description The tokens of every turn so far, summed (each turn's is on its `turn.ended`);
             *     zeros while the agent has reported none.
             */
            usage?: components["schemas"]["Usage"];
            variant?: string | null;
            workingDir?: string | null;
            workspace?: null | components["schemas"]["WorkspaceInfo"];
        };
        SessionList: {
            sessions: components["schemas"]["SessionInfo"][];
        };
        /** @enum {string} */
        SessionState: "preparing" | "installing" | "starting" | "running" | "awaitingInput" | "idle" | "ended" | "failed";
        SignalRequest: {
            /** @description A signal name (`SIGINT`, `INT`) or number. */
            signal: string;
            target?: components["schemas"]["SignalTarget"];
        };
        /**
         * @description Who receives a signal.
         * @enum {string}
         */
        SignalTarget: "group" | "foreground";
        Ticket: {
            /** Format: date-time */
            expiresAt: string;
            /** @description Single use, for `GET /v1/processes/{id}/connect?ticket=`. */
            ticket: string;
        };
        /** @enum {string} */
        TurnStatus: "completed" | "failed" | "interrupted";
        /** @description One event of a session. The SSE `id:` is `sequence`, the SSE `event:` is `type`. */
        UniversalEvent: components["schemas"]["EventData"] & {
            /** @description The agent's own id of the conversation, once the agent has one. */
            agentSessionId?: string | null;
            /** @description The agent's native line this event was converted from, where there is one. */
            raw?: string | null;
            /**
             * Format: int64
             * @description Monotonic per session, from 1; never reused, also across node agent restarts.
             */
            sequence: number;
            sessionId: string;
            source: components["schemas"]["EventSource"];
            /** Format: date-time */
            time: string;
        };
        /**
         * @description Tokens used, as the agent reports them: of one turn on `turn.ended`, summed over
         *     a session's turns in its info. The four counts are disjoint, so that they add up
         *     to every token processed: `inputTokens` is the input neither read from nor written
         *     to the prompt cache (an agent that reports cached tokens as part of its input has
         *     them taken out). Reasoning tokens are part of `outputTokens`, as providers bill them.
         */
        Usage: {
            /**
             * Format: int64
             * @description Input tokens read from the prompt cache.
             * @default 0
             */
            cacheReadTokens: number;
            /**
             * Format: int64
             * @description Input tokens written to the prompt cache.
             * @default 0
             */
            cacheWriteTokens: number;
            /**
             * Format: double
             * @description What the agent says the tokens cost, in US dollars, where it says so.
             * @default null
             */
            costUsd: number | null;
            /**
             * Format: int64
             * @description Input tokens neither read from nor written to the prompt cache.
             * @default 0
             */
            inputTokens: number;
            /**
             * Format: int64
             * @default 0
             */
            outputTokens: number;
        };
        /** @description A session's workspace as it is now (`SessionInfo.workspace`). */
        WorkspaceInfo: {
            /**
             * @description Files that differ from `commit` (untracked ones too, ignored ones not), as of
             *     the end of the last turn; at most 1,000.
             */
            changedFiles?: components["schemas"]["ChangedFile"][];
            /** @description More files changed than `changedFiles` lists. */
            changedFilesTruncated?: boolean;
            /** @description The commit checked out, once cloned: what `changedFiles` and the diff compare with. */
            commit?: string | null;
            /** @description The directory the session runs in. */
            path: string;
            /** @description The ref asked for. */
            ref?: string | null;
            /** @description The repository cloned (a password in it shown as `***`). */
            url?: string | null;
        };
        /**
         * @description `workspace` of a session: `git` is cloned (by this node agent, inside its sandbox)
         *     into `path`, or the session's `workingDir`, or else `<data dir>/workspaces/<id>`;
         *     without `git`, `path` is the directory the session runs in, as `workingDir` is
         *     (giving both, they must name the same directory).
         */
        WorkspaceRequest: {
            git?: null | components["schemas"]["GitSource"];
            /**
             * @description An absolute directory. With `git`: where the clone goes (it must not exist, or
             *     be empty; its parent must exist). Without: an existing directory.
             */
            path?: string | null;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    metrics: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description OpenMetrics text */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/openmetrics-text": unknown;
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    acp_socket: {
        parameters: {
            query: {
                /** @description The agent of every session made on this socket (`GET /v1/agents`). */
                agent: string;
                /** @description Its mode, model and permission mode; absent: the agent's defaults. */
                agentMode?: string;
                model?: string;
                permissionMode?: components["schemas"]["PermissionMode"];
                /** @description A ticket from `POST /v1/acp/ticket`, for clients that cannot send headers. */
                ticket?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Switching to the WebSocket protocol */
            101: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description invalid_request, unsupported_agent */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict: served on a Unix socket */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    acp_ticket: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Ticket"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    activity: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ActivityReport"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    list_agents: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AgentList"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    get_agent: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description Agent id */
                agent: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AgentInfo"];
                };
            };
            /** @description unsupported_agent */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    install_agent: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description Agent id */
                agent: string;
            };
            cookie?: never;
        };
        /** @description Optional: the pinned version by default */
        requestBody?: {
            content: {
                "application/json": null | components["schemas"]["InstallRequest"];
            };
        };
        responses: {
            /** @description Installed, or already there (`application/json`); with `Accept: text/event-stream`, `install.progress` events, then `install.completed` (an `InstallResult`) or `install.failed` (a `Problem`) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["InstallResult"];
                    "text/event-stream": components["schemas"]["InstallProgress"];
                };
            };
            /** @description invalid_request: not an exact version, or the built-in mock */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description unsupported_agent */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description install_failed, with npm's error; what was installed before is untouched */
            502: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    agent_models: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description Agent id */
                agent: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AgentModels"];
                };
            };
            /** @description unsupported_agent */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    agent_modes: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description Agent id */
                agent: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["AgentModes"];
                };
            };
            /** @description unsupported_agent */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    issue_login_code: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["LoginCode"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    exchange_login_code: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["ExchangeCodeRequest"];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["BrowserToken"];
                };
            };
            /** @description unauthorized: the code is unknown, used or expired */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    lifecycle_events: {
        parameters: {
            query?: never;
            header?: {
                /** @description Resume after this event */
                "Last-Event-ID"?: number | null;
            };
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": components["schemas"]["LifecycleEvent"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    download_tar: {
        parameters: {
            query: {
                path: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description A tar stream */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/x-tar": number[];
                };
            };
            /** @description not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    list_entries: {
        parameters: {
            query: {
                path: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsEntries"];
                };
            };
            /** @description forbidden_path */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    delete_entry: {
        parameters: {
            query: {
                path: string;
                /** @description Delete a directory with everything in it. */
                recursive?: boolean;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Deleted */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description forbidden_path (a root itself, or outside the roots) */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description directory_not_empty without `recursive` */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    read_file: {
        parameters: {
            query: {
                path: string;
            };
            header?: {
                /** @description One byte range: `bytes=a-b`, `bytes=a-` or `bytes=-n` */
                Range?: string | null;
            };
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The whole file */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/octet-stream": number[];
                };
            };
            /** @description The range asked for, with `Content-Range` */
            206: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/octet-stream": number[];
                };
            };
            /** @description is_a_directory */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description invalid_range */
            416: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    write_file: {
        parameters: {
            query: {
                path: string;
                /** @description Octal permission bits (`0644`, `755`); default: the replaced file's, else 0644. */
                mode?: string;
                /** @description Create missing parent directories. */
                parents?: boolean;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description The file's new content */
        requestBody: {
            content: {
                "application/octet-stream": number[];
            };
        };
        responses: {
            /** @description Replaced */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsEntry"];
                };
            };
            /** @description Created */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsEntry"];
                };
            };
            /** @description forbidden_path */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not_found: the directory is missing (see `parents`) */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description is_a_directory */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    make_directory: {
        parameters: {
            query: {
                path: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Already a directory */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsEntry"];
                };
            };
            /** @description Created */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsEntry"];
                };
            };
            /** @description conflict: something else is there */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    move_entry: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["FsMoveRequest"];
            };
        };
        responses: {
            /** @description The entry at `to` */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsEntry"];
                };
            };
            /** @description conflict: `to` exists and `overwrite` is false; directory_not_empty; is_a_directory; not_a_directory */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    stat_entry: {
        parameters: {
            query: {
                path: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsEntry"];
                };
            };
            /** @description forbidden_path */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    upload_tar: {
        parameters: {
            query: {
                path: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description A tar stream */
        requestBody: {
            content: {
                "application/x-tar": number[];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FsUploadResult"];
                };
            };
            /** @description forbidden_path, naming the entry */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    watch: {
        parameters: {
            query: {
                path: string;
                /** @description Watch the whole tree below `path` (the default), not just its entries. */
                recursive?: boolean;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": components["schemas"]["FsEvent"];
                };
            };
            /** @description not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    health: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Health"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    openapi_json: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description OpenAPI 3.1 document */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": Record<string, unknown>;
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    list_processes: {
        parameters: {
            query?: {
                /** @description Only processes with this tag. */
                tag?: string;
                /** @description Only processes with (true) or without (false) a PTY. */
                pty?: boolean;
                /** @description Only processes that feed this session. */
                session?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ProcessList"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    create_process: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateProcessRequest"];
            };
        };
        responses: {
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ProcessInfo"];
                };
            };
            /** @description invalid_request */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description session_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description process_already_exists; conflict: the session has ended */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description spawn_failed */
            422: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description limit_exceeded */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    get_process: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description Process id or tag */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ProcessInfo"];
                };
            };
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    delete_process: {
        parameters: {
            query?: {
                /**
                 * @description The stop signal sent to the whole process group (default `SIGHUP` for a PTY, as when a
                 *     terminal closes; `SIGTERM` otherwise).
                 */
                signal?: string;
                /** @description Seconds to wait after the stop signal before `SIGKILL` (default: the node agent's stop timeout). */
                timeout?: number;
                /** @description Forget the record too, instead of keeping it as exited. */
                purge?: boolean;
            };
            header?: never;
            path: {
                /** @description Process id or tag */
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ProcessInfo"];
                };
            };
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    connect: {
        parameters: {
            query?: {
                /** @description Resume from this byte offset; absent: from the oldest retained byte. */
                offset?: number;
                /** @description For a process without a PTY: which output to stream (default stdout). */
                stream?: components["schemas"]["OutputStream"];
                /** @description A single-use ticket from `POST /v1/processes/{id}/ticket`, for clients that cannot set headers. */
                ticket?: string;
                /**
                 * @description The client will `ack` what it consumes: at most 1 MiB is sent ahead of its
                 *     last ack from the first byte on (without it, only once it first acks).
                 */
                ack?: boolean;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Switching to the WebSocket protocol */
            101: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    write_input: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["InputRequest"];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ProcessInfo"];
                };
            };
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    read_output: {
        parameters: {
            query?: {
                /** @description Absolute byte offset to read from (default 0: the oldest retained byte). */
                offset?: number;
                stream?: components["schemas"]["OutputStream"];
                /** @description Most bytes to return (default and maximum 1 MiB). */
                limit?: number;
                encoding?: components["schemas"]["OutputEncoding"];
                /** @description Seconds to wait for output past `offset` when there is none yet (at most 60). */
                wait?: number;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["OutputChunk"];
                };
            };
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    read_interleaved_output: {
        parameters: {
            query?: {
                /** @description Sequence number of the first chunk to return (default 0: the oldest kept). */
                seq?: number;
                /** @description Only chunks received at or after this time: RFC 3339, or a number of seconds before now. */
                since?: string;
                /** @description Most bytes of data to return (default and maximum 1 MiB); at least one chunk is returned whole. */
                limit?: number;
                encoding?: components["schemas"]["OutputEncoding"];
                /** @description Seconds to wait for a chunk at or past `seq` when there is none yet (at most 60). */
                wait?: number;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["InterleavedOutput"];
                };
            };
            /** @description invalid_request: a process on a PTY (one stream: use `/output`), or a bad parameter */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    resize_process: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["PtySize"];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ProcessInfo"];
                };
            };
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    signal_process: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SignalRequest"];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ProcessInfo"];
                };
            };
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    issue_ticket: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Ticket"];
                };
            };
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    list_resources: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ResourceList"];
                };
            };
            /** @description not_found: not served by `agentplane up` */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    wake_sandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description The Sandbox's namespace (`default` unless its file names one) */
                namespace: string;
                /** @description The Sandbox's name */
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Asked to wake, or not suspended (`woken` says which) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SandboxWake"];
                };
            };
            /** @description not_found: no such Sandbox, or not served by `agentplane up` */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict: held by `spec.suspend: true`, or an external Sandbox (with an `endpoint`) that is never suspended here */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    resource_events: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description `event: resources`, `id:` the revision, `data:` the list */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": components["schemas"]["ResourceList"];
                };
            };
            /** @description not_found: not served by `agentplane up` */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    list_sessions: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionList"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    get_session: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description session_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    create_session: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description Session id */
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["CreateSessionRequest"];
            };
        };
        responses: {
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description invalid_request, unsupported_agent, mode_not_supported */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description session_already_exists */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    end_session: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description session_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    session_conversation: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The conversation */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/x-tar": number[];
                };
            };
            /** @description session_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description limit_exceeded: over 64 MiB packed */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    stage_conversation: {
        parameters: {
            query?: {
                /**
                 * @description The newest event sequence a client saw of this session where it was before:
                 *     the continued log's go on after it (and after the newest the tar holds).
                 */
                after?: number;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /** @description A conversation's tar */
        requestBody: {
            content: {
                "application/x-tar": number[];
            };
        };
        responses: {
            /** @description Staged: the session's creation continues it */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ConversationStaged"];
                };
            };
            /** @description invalid_request: not a conversation's tar, or another session's */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description session_already_exists */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description limit_exceeded: over 64 MiB */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    session_diff: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The diff */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/x-diff": string;
                };
            };
            /** @description session_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict: no git workspace, or not cloned yet */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description workspace_failed: git could not compare it */
            502: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    session_events: {
        parameters: {
            query?: {
                /** @description Events with a sequence greater than this (default 0: from the first). */
                offset?: number;
                /** @description Most events to return (default 1000, at most 10000). */
                limit?: number;
            };
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionEvents"];
                };
            };
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    session_events_sse: {
        parameters: {
            query?: {
                /** @description Events with a sequence greater than this (default 0). `Last-Event-ID` takes precedence. */
                offset?: number;
            };
            header?: {
                /** @description Resume after this event */
                "Last-Event-ID"?: number | null;
            };
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": components["schemas"]["UniversalEvent"];
                };
            };
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    interrupt_session: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Interrupted, or nothing to interrupt */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description session_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict: the session has ended or failed */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    send_message: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["SendMessageRequest"];
            };
        };
        responses: {
            /** @description Accepted; `messagesReceived` counts it */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description conflict: the session has ended */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description limit_exceeded: too many messages waiting */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    reply_permission: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
                /** @description Permission request id */
                pid: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["PermissionReplyRequest"];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description session_not_found, permission_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    reject_question: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
                /** @description Question id */
                qid: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description session_not_found, question_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    reply_question: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
                /** @description Question id */
                qid: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["QuestionReplyRequest"];
            };
        };
        responses: {
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description session_not_found, question_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
    restart_session: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: string;
            };
            cookie?: never;
        };
        /** @description Optional: the new environment */
        requestBody?: {
            content: {
                "application/json": null | components["schemas"]["RestartSessionRequest"];
            };
        };
        responses: {
            /** @description Restarted, or to restart between turns */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SessionInfo"];
                };
            };
            /** @description invalid_request: a body that is not a RestartSessionRequest */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description session_not_found */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description conflict: the session has ended, or is being restarted */
            409: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description limit_exceeded: --max-sessions live sessions */
            429: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
            /** @description An RFC 7807 problem document; `type` is `urn:agentplane:error:<code>` */
            default: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/problem+json": components["schemas"]["Problem"];
                };
            };
        };
    };
}
