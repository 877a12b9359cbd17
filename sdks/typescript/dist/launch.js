// Node only: runs `agentplane node-agent` for `AgentPlane.start()`.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
/** Every node agent started here and not yet stopped: stopped if this process exits first. */
const running = new Set();
let exitHookInstalled = false;
export async function launch(options) {
    const binary = options.binary ?? process.env.AGENTPLANE_BIN ?? "agentplane";
    const ownDataDir = options.dataDir === undefined;
    const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "agentplane-sdk-")));
    const token = randomBytes(24).toString("hex");
    const child = spawn(binary, [
        "node-agent",
        "--listen",
        "127.0.0.1:0",
        "--token-stdin",
        // Its stdin stays open: when this process goes, however it goes (SIGKILL too),
        // the pipe closes and the node agent stops with all it ran.
        "--stop-with-stdin",
        "--announce-ready",
        "--data-dir",
        dataDir,
        ...(options.args ?? []),
    ], {
        env: { ...process.env, ...options.env },
        stdio: ["pipe", "pipe", options.log ?? "ignore"],
    });
    const removeDataDir = async () => {
        if (ownDataDir)
            await rm(dataDir, { recursive: true, force: true }).catch(() => { });
    };
    const exited = new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null)
            resolve();
        child.once("exit", () => resolve());
        child.once("error", () => resolve());
    });
    const killOnExit = () => {
        // This process is going away without dispose(): SIGTERM still lets the node agent
        // stop what it runs (it does so on SIGTERM), which SIGKILL would not.
        child.kill("SIGTERM");
    };
    running.add(killOnExit);
    installExitHook();
    let stopping;
    const stop = () => {
        stopping ??= (async () => {
            running.delete(killOnExit);
            if (child.exitCode === null && child.signalCode === null) {
                child.stdin.end();
                child.kill("SIGTERM");
                const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
                await exited;
                clearTimeout(timer);
            }
            await removeDataDir();
        })();
        return stopping;
    };
    // A child that dies before reading its token makes this write fail: its exit says why.
    child.stdin.on("error", () => { });
    try {
        child.stdin.write(`${token}\n`);
        const baseUrl = await readyLine(child, options.timeoutMs ?? 30_000, binary);
        return { baseUrl, token, pid: child.pid ?? -1, stop };
    }
    catch (error) {
        await stop();
        throw error;
    }
}
/** Waits for `ready http://...` on the child's stdout. */
function readyLine(child, timeoutMs, binary) {
    return new Promise((resolve, reject) => {
        const lines = createInterface({ input: child.stdout });
        const fail = (message) => {
            cleanup();
            reject(new Error(message));
        };
        const timer = setTimeout(() => fail(`${binary} node-agent did not serve within ${timeoutMs} ms`), timeoutMs);
        const onLine = (line) => {
            const [word, url] = line.trim().split(/\s+/);
            if (word === "ready" && url?.startsWith("http")) {
                cleanup();
                // Read on, so that a stray write never blocks the node agent.
                child.stdout.resume();
                resolve(url);
            }
        };
        const onExit = (code, signal) => fail(`${binary} node-agent exited before serving (${signal ?? `exit code ${code}`}); pass log: "inherit" to see why`);
        const onError = (error) => fail(`could not run ${binary}: ${error.message} (set AGENTPLANE_BIN or binary)`);
        const cleanup = () => {
            clearTimeout(timer);
            lines.off("line", onLine);
            lines.close();
            child.off("exit", onExit);
            child.off("error", onError);
        };
        lines.on("line", onLine);
        child.once("exit", onExit);
        child.once("error", onError);
    });
}
function installExitHook() {
    if (exitHookInstalled)
        return;
    exitHookInstalled = true;
    process.once("exit", () => {
        for (const kill of running)
            kill();
    });
}
