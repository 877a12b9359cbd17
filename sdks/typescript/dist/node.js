// The Node entry point: everything the browser one has, and `AgentPlane.start()`.
import { setLauncher } from "./client.js";
import { launch } from "./launch.js";
setLauncher(launch);
export * from "./index.js";
