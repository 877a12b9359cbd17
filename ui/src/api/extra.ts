// Routes that `@agentplane/sdk` may not have methods for yet: `POST /v1/auth/exchange`
// and `GET /v1/resources` (+ `/sse`). When the SDK has them they are used; until then
// these call the routes with fetch, with the SDK's own error classes.
import { AgentPlane, AgentPlaneError, AgentPlaneNetworkError, type components } from "@agentplane/sdk";

type Schemas = components["schemas"];
export type ResourceCondition = Schemas["ResourceCondition"];
export type ResourceView = Schemas["ResourceView"];
export type FileError = Schemas["FileError"];
export type ResourceList = Schemas["ResourceList"];

export interface ResourcesApi {
  list(signal?: AbortSignal): Promise<ResourceList>;
  watch(options: { signal?: AbortSignal }): AsyncIterable<ResourceList>;
}

type SdkExchange = (options: { baseUrl: string; code: string; fetch?: typeof fetch }) => Promise<string>;

/** Trades a one-time `#code=` for the node agent's token (no token needed to ask). */
export async function exchangeCode(baseUrl: string, code: string, fetchImpl: typeof fetch): Promise<string> {
  const sdk = (AgentPlane as unknown as { exchangeCode?: SdkExchange }).exchangeCode;
  if (typeof sdk === "function") return sdk.call(AgentPlane, { baseUrl, code, fetch: fetchImpl });
  const url = `${baseUrl.replace(/\/+$/, "")}/v1/auth/exchange`;
  const label = "POST /v1/auth/exchange";
  let response: Response;
  try {
    response = await fetchImpl(url, {
      method: "POST",
      headers: { accept: "application/json", "content-type": "application/json" },
      body: JSON.stringify({ code }),
    });
  } catch (error) {
    throw new AgentPlaneNetworkError(label, error);
  }
  if (!response.ok) throw await AgentPlaneError.fromResponse(response, label);
  const { token } = (await response.json()) as { token: string };
  return token;
}

/** The resources of `agentplane up`: the SDK's `plane.resources` when it has it, else fetch. */
export function resourcesApi(plane: AgentPlane, token: string | undefined, fetchImpl: typeof fetch): ResourcesApi {
  const sdk = (plane as unknown as { resources?: Partial<ResourcesApi> }).resources;
  if (sdk && typeof sdk.list === "function" && typeof sdk.watch === "function") return sdk as ResourcesApi;
  const base = plane.baseUrl;
  const headers = (accept: string): Record<string, string> => {
    const h: Record<string, string> = { accept };
    if (token !== undefined) h.authorization = `Bearer ${token}`;
    return h;
  };
  const get = async (path: string, accept: string, signal?: AbortSignal): Promise<Response> => {
    const label = `GET ${path}`;
    let response: Response;
    try {
      response = await fetchImpl(`${base}${path}`, { headers: headers(accept), ...(signal ? { signal } : {}) });
    } catch (error) {
      if (signal?.aborted) throw error;
      throw new AgentPlaneNetworkError(label, error);
    }
    if (!response.ok) throw await AgentPlaneError.fromResponse(response, label);
    return response;
  };
  return {
    async list(signal) {
      return (await (await get("/v1/resources", "application/json", signal)).json()) as ResourceList;
    },
    async *watch({ signal }) {
      let delay = 200;
      while (!signal?.aborted) {
        try {
          const response = await get("/v1/resources/sse", "text/event-stream", signal);
          if (!response.body) throw new AgentPlaneNetworkError("GET /v1/resources/sse", new Error("no body"));
          for await (const data of sseData(response.body)) {
            const value = JSON.parse(data) as Partial<ResourceList>;
            if (!Array.isArray(value.resources)) continue;
            delay = 200;
            yield { resources: value.resources, fileErrors: value.fileErrors ?? [], revision: value.revision ?? 0 };
          }
        } catch (error) {
          if (signal?.aborted) return;
          if (error instanceof AgentPlaneError && error.status < 500) throw error;
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 5000);
      }
    },
  };
}

/** The `data` of each event of an SSE body. */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data: string[] = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop() ?? "";
      for (const line of lines) {
        if (line === "") {
          if (data.length > 0) yield data.join("\n");
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        }
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}
