// Small formatting helpers shared by the views.
import { AgentPlaneError, AgentPlaneNetworkError } from "@agentplane/sdk";
import { useEffect, useState } from "react";

export function errorText(error: unknown): string {
  if (error instanceof AgentPlaneError) return `${error.title || `HTTP ${error.status}`}: ${error.detail}`;
  if (error instanceof AgentPlaneNetworkError) return `The node agent did not answer (${error.message})`;
  if (error instanceof Error) return error.message;
  return String(error);
}

export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && (error.name === "AbortError" || error.name === "TimeoutError");
}

export function relativeTime(time: string | number | undefined | null, now = Date.now()): string {
  if (time === undefined || time === null || time === "") return "—";
  const then = typeof time === "number" ? time : Date.parse(time);
  if (Number.isNaN(then)) return "—";
  const seconds = Math.round((now - then) / 1000);
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${seconds} s ago`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h ago`;
  return new Date(then).toLocaleDateString();
}

/**
 * How long since `time`, as `agentplane get` shows a sandbox suspended (`12 s`, `4 min`,
 * `3 h`, `2 d`); "" when there is no time.
 */
export function elapsed(time: string | number | undefined | null, now = Date.now()): string {
  if (time === undefined || time === null || time === "") return "";
  const then = typeof time === "number" ? time : Date.parse(time);
  if (Number.isNaN(then)) return "";
  const seconds = Math.max(0, Math.floor((now - then) / 1000));
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3600)} h`;
  return `${Math.floor(seconds / 86_400)} d`;
}

// One formatter for all (making one per call is most of the cost of formatting).
const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });

export function clockTime(time: string | number | undefined | null): string {
  if (time === undefined || time === null) return "";
  const date = new Date(time);
  if (Number.isNaN(date.getTime())) return "";
  return clock.format(date);
}

const integer = new Intl.NumberFormat();

export function count(n: number): string {
  return integer.format(n);
}

export function absoluteTime(time: string | number | undefined | null): string {
  if (time === undefined || time === null) return "";
  const date = new Date(time);
  return Number.isNaN(date.getTime()) ? "" : date.toISOString();
}

export function commandLine(command: string, args: readonly string[]): string {
  return [command, ...args].map(shellWord).join(" ");
}

function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

export function bytesToBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

export function base64ToBytes(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** Re-renders every `ms` so relative times stay true. */
export function useNow(ms = 10_000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(timer);
  }, [ms]);
  return now;
}
