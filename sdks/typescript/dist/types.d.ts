import type { components } from "./generated/openapi.js";
type Schemas = components["schemas"];
export type Health = Schemas["Health"];
export type Problem = Schemas["Problem"];
export type CreateProcessRequest = Schemas["CreateProcessRequest"];
export type ProcessInfo = Schemas["ProcessInfo"];
export type ProcessStatus = Schemas["ProcessStatus"];
export type PtySize = Schemas["PtySize"];
export type SignalTarget = Schemas["SignalTarget"];
export type OutputChunk = Schemas["OutputChunk"];
export type OutputStream = Schemas["OutputStream"];
export type OutputEncoding = Schemas["OutputEncoding"];
export type InterleavedOutput = Schemas["InterleavedOutput"];
export type ControlMessage = Schemas["ControlMessage"];
export type LifecycleEvent = Schemas["LifecycleEvent"];
export type LifecycleEventType = Schemas["LifecycleEventType"];
export type Gap = Schemas["Gap"];
export type AgentInfo = Schemas["AgentInfo"];
export type AgentCapabilities = Schemas["AgentCapabilities"];
export type AgentModes = Schemas["AgentModes"];
export type AgentModels = Schemas["AgentModels"];
export type InstallRequest = Schemas["InstallRequest"];
export type InstallProgress = Schemas["InstallProgress"];
export type InstallResult = Schemas["InstallResult"];
export type FsEntry = Schemas["FsEntry"];
export type FsEntryType = Schemas["FsEntryType"];
export type FsEntries = Schemas["FsEntries"];
export type FsEvent = Schemas["FsEvent"];
export type FsEventType = Schemas["FsEventType"];
export type FsUploadResult = Schemas["FsUploadResult"];
export type CreateSessionRequest = Schemas["CreateSessionRequest"];
export type SessionInfo = Schemas["SessionInfo"];
export type SessionState = Schemas["SessionState"];
export type PermissionMode = Schemas["PermissionMode"];
export type PermissionReply = Schemas["PermissionReply"];
export type PermissionRequest = Schemas["PermissionRequest"];
export type QuestionRequest = Schemas["QuestionRequest"];
export type SessionEvents = Schemas["SessionEvents"];
/** One universal event: the envelope, discriminated by `type`. */
export type UniversalEvent = Schemas["UniversalEvent"];
export type EventType = Schemas["EventType"];
export type Item = Schemas["Item"];
export type LoginCode = Schemas["LoginCode"];
export type BrowserToken = Schemas["BrowserToken"];
/** One resource of `agentplane up`'s store, with the node-agent id to open it by. */
export type ResourceView = Schemas["ResourceView"];
/** Everything `resources.list()` and each step of `resources.watch()` give. */
export type ResourceList = Schemas["ResourceList"];
export type ResourceKind = Schemas["ResourceKind"];
export type ResourceCondition = Schemas["ResourceCondition"];
/** A file of the watched folder that was not taken, with where (line, column) and why. */
export type FileError = Schemas["FileError"];
/** Sequences `[from, to)` of a session's events that are lost for good. */
export interface EventGap {
    type: "gap";
    from: number;
    to: number;
}
/** What `sessions.events()` yields: universal events, and a gap marker where some are lost. */
export type SessionStreamEvent = UniversalEvent | EventGap;
/**
 * What `processEvents()` yields: lifecycle events; a `gap` where some are no longer
 * kept; a `reset` when the node agent restarted since the last id (its numbering
 * started over: list the processes again).
 */
export type ProcessStreamEvent = LifecycleEvent | {
    type: "gap";
    from: number;
    to: number;
} | {
    type: "reset";
    reason: string;
    latest: number;
};
export {};
