/** The fields of an RFC 7807 problem document, as the node agent sends them. */
export interface ProblemFields {
  /** `urn:agentplane:error:<code>`, or `about:blank` for an answer that was no problem document. */
  type: string;
  title: string;
  status: number;
  detail: string;
}

const PREFIX = "urn:agentplane:error:";

/**
 * A non-2xx answer from the node agent (or from whatever stands in front of it).
 * `type` is the stable problem type URN; `code` is its last part
 * (`process_not_found`, `unauthorized`, `invalid_request`, ...).
 */
export class AgentPlaneError extends Error implements ProblemFields {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  /** The method and path that failed, e.g. `GET /v1/processes/x`. */
  readonly request: string;

  constructor(problem: ProblemFields, request: string) {
    super(`${request}: ${problem.status} ${problem.title}: ${problem.detail}`);
    this.name = "AgentPlaneError";
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    this.detail = problem.detail;
    this.request = request;
  }

  /** The part of `type` after `urn:agentplane:error:` (the whole `type` otherwise). */
  get code(): string {
    return this.type.startsWith(PREFIX) ? this.type.slice(PREFIX.length) : this.type;
  }

  /** Reads a failed response: a problem document when it is one, else its status and text. */
  static async fromResponse(response: Response, request: string): Promise<AgentPlaneError> {
    const text = await response.text().catch(() => "");
    const problem = parseProblem(text);
    if (problem) return new AgentPlaneError(problem, request);
    return new AgentPlaneError(
      {
        type: "about:blank",
        title: response.statusText || `HTTP ${response.status}`,
        status: response.status,
        detail: text.slice(0, 500) || "(no body)",
      },
      request,
    );
  }
}

/**
 * The node agent could not be reached or the connection broke: no answer at all,
 * as opposed to an {@link AgentPlaneError}. `cause` is the platform's error.
 */
export class AgentPlaneNetworkError extends Error {
  readonly request: string;

  constructor(request: string, cause: unknown) {
    super(`${request}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = "AgentPlaneNetworkError";
    this.request = request;
  }
}

/** A problem document in `text`, when it holds one. */
export function parseProblem(text: string): ProblemFields | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v.type !== "string" || typeof v.status !== "number") return undefined;
  return {
    type: v.type,
    title: typeof v.title === "string" ? v.title : "",
    status: v.status,
    detail: typeof v.detail === "string" ? v.detail : "",
  };
}
