const PREFIX = "urn:agentplane:error:";
/**
 * A non-2xx answer from the node agent (or from whatever stands in front of it).
 * `type` is the stable problem type URN; `code` is its last part
 * (`process_not_found`, `unauthorized`, `invalid_request`, ...).
 */
export class AgentPlaneError extends Error {
    type;
    title;
    status;
    detail;
    /** The method and path that failed, e.g. `GET /v1/processes/x`. */
    request;
    constructor(problem, request) {
        super(`${request}: ${problem.status} ${problem.title}: ${problem.detail}`);
        this.name = "AgentPlaneError";
        this.type = problem.type;
        this.title = problem.title;
        this.status = problem.status;
        this.detail = problem.detail;
        this.request = request;
    }
    /** The part of `type` after `urn:agentplane:error:` (the whole `type` otherwise). */
    get code() {
        return this.type.startsWith(PREFIX) ? this.type.slice(PREFIX.length) : this.type;
    }
    /** Reads a failed response: a problem document when it is one, else its status and text. */
    static async fromResponse(response, request) {
        const text = await response.text().catch(() => "");
        const problem = parseProblem(text);
        if (problem)
            return new AgentPlaneError(problem, request);
        return new AgentPlaneError({
            type: "about:blank",
            title: response.statusText || `HTTP ${response.status}`,
            status: response.status,
            detail: text.slice(0, 500) || "(no body)",
        }, request);
    }
}
/**
 * The node agent could not be reached or the connection broke: no answer at all,
 * as opposed to an {@link AgentPlaneError}. `cause` is the platform's error.
 */
export class AgentPlaneNetworkError extends Error {
    request;
    constructor(request, cause) {
        super(`${request}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
        this.name = "AgentPlaneNetworkError";
        this.request = request;
    }
}
/** A problem document in `text`, when it holds one. */
export function parseProblem(text) {
    let value;
    try {
        value = JSON.parse(text);
    }
    catch {
        return undefined;
    }
    if (typeof value !== "object" || value === null)
        return undefined;
    const v = value;
    if (typeof v.type !== "string" || typeof v.status !== "number")
        return undefined;
    return {
        type: v.type,
        title: typeof v.title === "string" ? v.title : "",
        status: v.status,
        detail: typeof v.detail === "string" ? v.detail : "",
    };
}
