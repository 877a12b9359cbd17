import type { RequestBody } from "./http.js";
import type { FsEntries, FsEntry, FsEvent, FsUploadResult } from "./types.js";
/** What a file's bytes may be given as: every body `fetch` takes. */
export type FileBody = RequestBody;
/** Options of {@link Files.write}. */
export interface WriteOptions {
    /** Permission bits (`0o755`); by default the replaced file's, else `0o644`. */
    mode?: number | undefined;
    /** Creates missing parent directories. */
    parents?: boolean | undefined;
    signal?: AbortSignal | undefined;
}
/** A byte range of {@link Files.read}: `start` to `end` inclusive, or the last `suffix` bytes. */
export type ByteRange = {
    start: number;
    end?: number | undefined;
} | {
    suffix: number;
};
/**
 * The node agent's files (`/v1/fs/*`), confined to its roots (`--fs-root`, by default
 * its working directory). A relative path is taken against the first root. Bodies are
 * streamed both ways: nothing here holds a whole file unless the caller asks for it
 * (`readText`, `readBytes`).
 */
export declare class Files {
    #private;
    /** A directory's entries, by name. */
    list(path: string, signal?: AbortSignal): Promise<FsEntries>;
    /** One entry, as `lstat` sees it (a symlink is reported as one, with its target). */
    stat(path: string, signal?: AbortSignal): Promise<FsEntry>;
    /**
     * A file's bytes as a stream (a range of them when asked), from the answer's body:
     * read it or cancel it.
     */
    read(path: string, options?: {
        range?: ByteRange | undefined;
        signal?: AbortSignal | undefined;
    }): Promise<ReadableStream<Uint8Array>>;
    /** A whole file's bytes. */
    readBytes(path: string, options?: {
        range?: ByteRange | undefined;
        signal?: AbortSignal | undefined;
    }): Promise<Uint8Array>;
    /** A whole file as UTF-8 text. */
    readText(path: string, signal?: AbortSignal): Promise<string>;
    /**
     * Writes a file: the body is streamed into a temporary file beside it, which then
     * replaces it at once, so a reader sees the old file or the new one, never a mix.
     */
    write(path: string, body: FileBody, options?: WriteOptions): Promise<FsEntry>;
    /** Makes a directory and its missing parents (nothing to do when it is one already). */
    mkdir(path: string, signal?: AbortSignal): Promise<FsEntry>;
    /** Moves (renames) an entry; `overwrite` replaces what is at `to`. */
    move(from: string, to: string, options?: {
        overwrite?: boolean | undefined;
        signal?: AbortSignal | undefined;
    }): Promise<FsEntry>;
    /** Deletes an entry; a non-empty directory only with `recursive`. A symlink is removed, never followed. */
    delete(path: string, options?: {
        recursive?: boolean | undefined;
        signal?: AbortSignal | undefined;
    }): Promise<void>;
    /** Unpacks a tar stream into the directory `path` (made when missing). */
    upload(path: string, tar: FileBody, signal?: AbortSignal): Promise<FsUploadResult>;
    /** A directory (entries relative to it) or one file, as a tar stream. */
    download(path: string, signal?: AbortSignal): Promise<ReadableStream<Uint8Array>>;
    /**
     * Changes under `path` (`created`, `modified`, `removed`, `renamed`), in order, until
     * `signal` fires or the loop breaks. Changes are not kept for a later reader: when
     * the connection drops, a `gap` item says so and the watch starts again (list the
     * directory to catch up). An error answer (`not_found`, ...) is thrown.
     */
    watch(path: string, options?: {
        recursive?: boolean | undefined;
        signal?: AbortSignal | undefined;
    }): AsyncGenerator<FsEvent>;
}
