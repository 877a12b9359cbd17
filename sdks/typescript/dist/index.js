// @agentplane/sdk: a typed client for the agentplane node agent.
export { AgentPlane, Agents, Processes, Resources, Sessions } from "./client.js";
export { AgentPlaneError, AgentPlaneNetworkError } from "./errors.js";
export { Files } from "./files.js";
export { Terminal } from "./terminal.js";
