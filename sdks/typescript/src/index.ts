// @agentplane/sdk: a typed client for the agentplane node agent.
export { AgentPlane, Agents, Processes, Resources, Sessions } from "./client.js";
export type { ConnectOptions, StartOptions, StopOptions } from "./client.js";
export { AgentPlaneError, AgentPlaneNetworkError } from "./errors.js";
export { Files } from "./files.js";
export type { ByteRange, FileBody, WriteOptions } from "./files.js";
export type { ProblemFields } from "./errors.js";
export { Terminal } from "./terminal.js";
export type { TerminalExit, TerminalGap, TerminalOptions, TerminalState, WebSocketConstructor } from "./terminal.js";
export type * from "./types.js";
export type { components, operations, paths } from "./generated/openapi.js";
