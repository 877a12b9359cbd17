import { fileURLToPath } from "node:url";
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The node agent serves this build at /ui/ from files embedded in its binary, and the
// build is committed: the same sources must give byte-identical files (the asset names
// are content hashes; no source maps, no timestamps).
//
// `npm run dev` talks to a node agent across origins (run it with
// `--cors-origin http://127.0.0.1:5173`), or, with AGENTPLANE_DEV_PROXY=URL, to one
// behind this server's /v1 (`agentplane up` has no --cors-origin): the page then
// connects to its own origin, as it does when the node agent serves it.
export default defineConfig(({ command }) => {
  const proxy = command === "serve" ? process.env.AGENTPLANE_DEV_PROXY : undefined;
  if (proxy) process.env.VITE_SAME_ORIGIN = "1";
  return {
    base: "/ui/",
    plugins: [react()],
    build: {
      outDir: "dist",
      emptyOutDir: true,
      sourcemap: false,
      target: "es2022",
      reportCompressedSize: false,
      chunkSizeWarningLimit: 1024,
    },
    server: {
      host: "127.0.0.1",
      port: 5173,
      strictPort: true,
      // @agentplane/sdk is linked from ../sdks/typescript.
      fs: { allow: [fileURLToPath(new URL(".", import.meta.url)), fileURLToPath(new URL("../sdks/typescript", import.meta.url))] },
      proxy: proxy ? { "/v1": { target: proxy, ws: true, changeOrigin: true, rewriteWsOrigin: true } } : {},
    },
    preview: { host: "127.0.0.1", port: 4173, strictPort: true },
  };
});
