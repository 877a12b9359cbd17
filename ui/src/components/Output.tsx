// Text as a tool printed it: a unified diff shown as one (+/- lines colored), and
// anything longer than FOLD_LINES folded behind "Show all".
import { memo, useState } from "react";

const FOLD_LINES = 20;

/** A unified diff: a `@@ -a,b +c,d @@` hunk, after `---`/`+++` headers or `diff --git`. */
export function looksLikeDiff(text: string): boolean {
  if (!/^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@/m.test(text)) return false;
  return /^(?:diff --git |--- \S|\+\+\+ \S|Index: )/m.test(text) || /^@@ /.test(text);
}

function lineClass(line: string): string {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") || line.startsWith("index ")) return "d-meta";
  if (line.startsWith("@@")) return "d-hunk";
  if (line.startsWith("+")) return "d-add";
  if (line.startsWith("-")) return "d-del";
  return "d-ctx";
}

/** Which folded outputs are open, by id: kept while a row scrolls out of the window and back. */
const opened = new Set<string>();

interface Props {
  text: string;
  /** Remembers "Show all" under this id across unmounts. */
  id?: string;
  label?: string;
  /** Render as a diff when it looks like one (default true). */
  diff?: boolean;
  className?: string;
}

export const Output = memo(function Output({ text, id, label, diff = true, className }: Props) {
  const [open, setOpenState] = useState(() => id !== undefined && opened.has(id));
  const setOpen = (value: boolean) => {
    if (id !== undefined) {
      if (value) opened.add(id);
      else opened.delete(id);
    }
    setOpenState(value);
  };
  const lines = text.replace(/\n$/, "").split("\n");
  const folded = lines.length > FOLD_LINES && !open;
  const shown = folded ? lines.slice(0, FOLD_LINES) : lines;
  const isDiff = diff && looksLikeDiff(text);
  return (
    <div className={`output ${className ?? ""}`}>
      {isDiff ? (
        <pre className="code diff" aria-label={label ? `${label} (diff)` : "diff"}>
          {shown.map((line, i) => (
            <span key={i} className={lineClass(line)}>
              {line}
              {"\n"}
            </span>
          ))}
        </pre>
      ) : (
        <pre className="code" aria-label={label}>
          {shown.join("\n")}
        </pre>
      )}
      {lines.length > FOLD_LINES && (
        <div className="fold">
          <button type="button" className="link" aria-expanded={open} onClick={() => setOpen(!open)}>
            {open ? "Show less" : "Show all"}
          </button>
          <span className="muted">{open ? `${lines.length} lines` : `${lines.length - FOLD_LINES} more lines`}</span>
        </div>
      )}
    </div>
  );
});
