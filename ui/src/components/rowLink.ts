// A table row that opens what it lists wherever it is clicked, not only on its link:
// the link stays (keyboard, middle-click, copy address); the row forwards other clicks.
import type { MouseEvent } from "react";

/** Props for a `<tr>` that opens `target` (a `#/...` address) when clicked; none without one. */
export function rowLink(target: string | undefined): { className?: string; onClick?: (event: MouseEvent<HTMLElement>) => void } {
  if (!target) return {};
  return {
    className: "clickable",
    onClick: (event) => {
      // A click on a link or a button inside is theirs; selecting text is not a click.
      if ((event.target as Element).closest("a, button, input, select, textarea, pre")) return;
      if (window.getSelection()?.toString()) return;
      location.hash = target;
    },
  };
}
