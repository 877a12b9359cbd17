/** The fields of an RFC 7807 problem document, as the node agent sends them. */
export interface ProblemFields {
    /** `urn:agentplane:error:<code>`, or `about:blank` for an answer that was no problem document. */
    type: string;
    title: string;
    status: number;
    detail: string;
}
/**
 * A non-2xx answer from the node agent (or from whatever stands in front of it).
 * `type` is the stable problem type URN; `code` is its last part
 * (`process_not_found`, `unauthorized`, `invalid_request`, ...).
 */
export declare class AgentPlaneError extends Error implements ProblemFields {
    readonly type: string;
    readonly title: string;
    readonly status: number;
    readonly detail: string;
    /** The method and path that failed, e.g. `GET /v1/processes/x`. */
    readonly request: string;
    constructor(problem: ProblemFields, request: string);
    /** The part of `type` after `urn:agentplane:error:` (the whole `type` otherwise). */
    get code(): string;
    /** Reads a failed response: a problem document when it is one, else its status and text. */
    static fromResponse(response: Response, request: string): Promise<AgentPlaneError>;
}
/**
 * The node agent could not be reached or the connection broke: no answer at all,
 * as opposed to an {@link AgentPlaneError}. `cause` is the platform's error.
 */
export declare class AgentPlaneNetworkError extends Error {
    readonly request: string;
    constructor(request: string, cause: unknown);
}
/** A problem document in `text`, when it holds one. */
export declare function parseProblem(text: string): ProblemFields | undefined;
