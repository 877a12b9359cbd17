import { fileURLToPath } from "node:url";
import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// The node agent serves this build at /ui/ from files embedded in its binary, and the
// build is committed: the same sources must give byte-identical files (the asset names
// are content hashes; no source maps, no timestamps).
export default defineConfig({
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
  },
  preview: { host: "127.0.0.1", port: 4173, strictPort: true },
});
