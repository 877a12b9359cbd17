// Connecting to a node agent: the SDK client over a logging fetch, checked with a
// real call, and failures told in plain words.
import { AgentPlane, AgentPlaneError, AgentPlaneNetworkError, type Resources, type components } from "@agentplane/sdk";
import { loggingFetch } from "./requestLog";

export type SandboxWake = components["schemas"]["SandboxWake"];

export interface Connection {
  plane: AgentPlane;
  baseUrl: string;
  /** `plane.resources`, when `agentplane up` runs this node agent (else it has none to show). */
  resources: Resources | undefined;
  /** Wakes a suspended Sandbox of `up`'s store; present with `resources`. */
  wakeSandbox: ((namespace: string, name: string) => Promise<SandboxWake>) | undefined;
  version: string;
}

export interface ConnectProblem {
  title: string;
  detail: string;
  /** A command that fixes it, shown as is. */
  command?: string;
}

const TOKEN_KEY = "agentplane.token";
const ENDPOINT_KEY = "agentplane.endpoint";

/** The token lives in this tab's sessionStorage only: never in a URL, never in localStorage. */
export const savedCredentials = {
  get(): { endpoint: string; token: string } | undefined {
    const endpoint = sessionStorage.getItem(ENDPOINT_KEY);
    const token = sessionStorage.getItem(TOKEN_KEY);
    return endpoint && token ? { endpoint, token } : undefined;
  },
  endpoint(): string | undefined {
    return sessionStorage.getItem(ENDPOINT_KEY) ?? undefined;
  },
  save(endpoint: string, token: string): void {
    sessionStorage.setItem(ENDPOINT_KEY, endpoint);
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  forgetToken(): void {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

/** Where the node agent probably is: this page's own origin when it serves the page at /ui/. */
export function defaultEndpoint(): string {
  const sameOrigin = !import.meta.env.DEV || import.meta.env.VITE_SAME_ORIGIN === "1";
  if (sameOrigin && location.pathname.startsWith("/ui")) return location.origin;
  return "http://127.0.0.1:2468";
}

export function normalizeEndpoint(endpoint: string): string {
  const trimmed = endpoint.trim();
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed) ? trimmed : `http://${trimmed}`;
  const url = new URL(withScheme);
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError("the endpoint must be an http:// or https:// URL");
  return url.href.replace(/\/+$/, "");
}

/**
 * Connects and checks the token with a real call. `onRefused` is called when, later,
 * the node agent answers 401 to a call that carried the token (it restarted with
 * another one, or the page's own token was forgotten).
 */
export async function connect(endpoint: string, token: string, onRefused?: () => void): Promise<Connection> {
  const baseUrl = normalizeEndpoint(endpoint);
  const logged = loggingFetch(baseUrl);
  let checked = false;
  const fetchImpl: typeof fetch = async (input, init) => {
    const response = await logged(input, init);
    if (checked && response.status === 401 && new Headers(init?.headers).has("authorization")) onRefused?.();
    return response;
  };
  const plane = AgentPlane.connect({ baseUrl, token, fetch: fetchImpl });
  const health = await plane.health();
  await plane.sessions.list(); // the token is checked here
  let resources: Resources | undefined = plane.resources;
  try {
    await resources.list();
  } catch (error) {
    if (!(error instanceof AgentPlaneError && (error.status === 404 || error.code === "not_found"))) {
      console.warn("resources unavailable:", error);
    }
    resources = undefined;
  }
  checked = true;
  const wakeSandbox = resources && ((namespace: string, name: string) => wake(baseUrl, token, fetchImpl, namespace, name));
  return { plane, baseUrl, resources, wakeSandbox, version: health.version };
}

/**
 * `POST /v1/resources/sandboxes/{namespace}/{name}/wake`, through the page's logging
 * fetch (so it is in the request log) and failing as the SDK's calls do. Made here:
 * the SDK has no call for it, and the page needs nothing else of it.
 */
async function wake(baseUrl: string, token: string, fetchImpl: typeof fetch, namespace: string, name: string): Promise<SandboxWake> {
  const path = `/v1/resources/sandboxes/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/wake`;
  const label = `POST ${path}`;
  let response: Response;
  try {
    response = await fetchImpl(`${baseUrl}${path}`, { method: "POST", headers: { accept: "application/json", authorization: `Bearer ${token}` } });
  } catch (error) {
    throw new AgentPlaneNetworkError(label, error);
  }
  if (!response.ok) throw await AgentPlaneError.fromResponse(response, label);
  return (await response.json()) as SandboxWake;
}

/** Says why connecting failed, in words a person can act on. */
export async function explain(error: unknown, endpoint: string): Promise<ConnectProblem> {
  let baseUrl = endpoint;
  try {
    baseUrl = normalizeEndpoint(endpoint);
  } catch (invalid) {
    return { title: "That endpoint is not a URL", detail: invalid instanceof Error ? invalid.message : String(invalid) };
  }
  if (error instanceof AgentPlaneError) {
    if (error.request.includes("/v1/auth/exchange")) {
      return {
        title: "This sign-in link no longer works",
        detail: `${error.detail || error.title}. Each link works once, for a short while; or enter the token.`,
      };
    }
    if (error.status === 401 || error.code === "unauthorized") {
      return {
        title: "The node agent refused this token",
        detail: "Give the token it was started with (--token), or open the link `agentplane up` printed.",
      };
    }
    return { title: `The node agent answered ${error.status} ${error.title}`, detail: error.detail };
  }
  if (error instanceof AgentPlaneNetworkError || error instanceof TypeError) {
    const origin = new URL(baseUrl).origin;
    if (origin !== location.origin && (await reachableWithoutCors(baseUrl))) {
      return {
        title: "The node agent does not allow this page's origin",
        detail: `It answers at ${baseUrl}, but the browser blocks its answers to a page from ${location.origin}. Run the node agent with this page's origin allowed:`,
        command: `agentplane node-agent --cors-origin ${location.origin}`,
      };
    }
    return {
      title: `Nothing answers at ${baseUrl}`,
      detail: "A node agent must be running there (agentplane node-agent, or agentplane up). Check the address and port.",
    };
  }
  return { title: "Could not connect", detail: error instanceof Error ? error.message : String(error) };
}

/** True when something answers at `baseUrl` (an opaque answer: CORS is not checked in no-cors mode). */
async function reachableWithoutCors(baseUrl: string): Promise<boolean> {
  try {
    await fetch(`${baseUrl}/v1/health`, { mode: "no-cors", cache: "no-store", signal: AbortSignal.timeout(5000) });
    return true;
  } catch {
    return false;
  }
}
