import { createRoot } from "react-dom/client";
import { App } from "./App";
import "./styles.css";

// The one global: tests read each open terminal's xterm.js buffer through it.
window.__inspector = { terminals: {} };

const root = document.getElementById("root");
if (!root) throw new Error("no #root element");
createRoot(root).render(<App />);
