import type { Launched, StartOptions } from "./client.js";
export declare function launch(options: StartOptions): Promise<Launched>;
