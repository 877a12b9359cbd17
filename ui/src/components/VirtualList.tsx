// Renders only the rows near the viewport of a long list whose rows differ in height:
// heights are measured once rendered (ResizeObserver) and estimated before; the space
// of the rows not rendered is padding. It can keep to the bottom while rows arrive.
//
// Rows usually only get appended (a conversation): the keys, their index and the row
// offsets are kept between renders and extended, not rebuilt, so a render costs what
// changed, not the length of the list.
import { type ReactNode, useCallback, useEffect, useLayoutEffect, useRef, useState } from "react";

interface Props<T> {
  items: readonly T[];
  /** Changes whenever a row may have changed (the items array can be the same object). */
  version: number;
  getKey(item: T): string;
  render(item: T, index: number): ReactNode;
  estimate?: number;
  /** Start at the bottom and stay there while the reader is there. */
  stickToBottom?: boolean;
  overscanPx?: number;
  className?: string;
  label: string;
}

/** Keys, their index, and the offset where each row starts, kept across renders. */
class Layout {
  keys: string[] = [];
  indexOf = new Map<string, number>();
  /** tops[i]: where row i starts; tops[count]: the total height. */
  tops = new Float64Array(1024);
  heights = new Map<string, number>();
  /** Offsets from this row on are stale. */
  dirtyFrom = 0;

  /** Brings keys and offsets up to `items`: extends them when rows were only appended. */
  update<T>(items: readonly T[], getKey: (item: T) => string, estimate: number): number {
    const count = items.length;
    let same = count >= this.keys.length;
    // Appended only: the first and the last known keys are where they were.
    if (same && this.keys.length > 0) {
      const last = this.keys.length - 1;
      same = getKey(items[0] as T) === this.keys[0] && getKey(items[last] as T) === this.keys[last];
    }
    if (!same) {
      this.keys = [];
      this.indexOf.clear();
      this.dirtyFrom = 0;
    }
    for (let i = this.keys.length; i < count; i += 1) {
      const key = getKey(items[i] as T);
      this.keys.push(key);
      this.indexOf.set(key, i);
    }
    if (this.tops.length < count + 1) {
      const grown = new Float64Array(Math.max(count + 1, this.tops.length * 2));
      grown.set(this.tops.subarray(0, Math.min(this.tops.length, this.dirtyFrom + 1)));
      this.tops = grown;
    }
    const from = Math.min(this.dirtyFrom, count);
    if (from === 0) this.tops[0] = 0;
    for (let i = from; i < count; i += 1) {
      this.tops[i + 1] = (this.tops[i] ?? 0) + (this.heights.get(this.keys[i] as string) ?? estimate);
    }
    this.dirtyFrom = count;
    return count;
  }

  /** A row's measured height; offsets after it become stale. */
  measured(key: string, height: number): void {
    this.heights.set(key, height);
    const index = this.indexOf.get(key);
    if (index !== undefined && index < this.dirtyFrom) this.dirtyFrom = index;
  }
}

export function VirtualList<T>({
  items,
  version,
  getKey,
  render,
  estimate = 64,
  stickToBottom = false,
  overscanPx = 800,
  className,
  label,
}: Props<T>) {
  const scroller = useRef<HTMLDivElement>(null);
  const layout = useRef<Layout>(null as unknown as Layout);
  if (layout.current === null) layout.current = new Layout();
  const atBottom = useRef(stickToBottom);
  const [viewport, setViewport] = useState({ top: 0, height: 800 });
  const [measured, setMeasured] = useState(0);
  const [showJump, setShowJump] = useState(false);
  const pendingFrame = useRef(0);

  const rerender = useCallback(() => {
    if (pendingFrame.current) return;
    pendingFrame.current = requestAnimationFrame(() => {
      pendingFrame.current = 0;
      setMeasured((n) => n + 1);
    });
  }, []);

  const observer = useRef<ResizeObserver | null>(null);
  if (observer.current === null && typeof ResizeObserver !== "undefined") {
    observer.current = new ResizeObserver((entries) => {
      const rows = layout.current;
      let changed = false;
      let shiftAbove = 0;
      const el = scroller.current;
      const scrollTop = el?.scrollTop ?? 0;
      for (const entry of entries) {
        const target = entry.target as HTMLElement;
        const key = target.dataset.key;
        if (key === undefined || !target.isConnected) continue;
        const height = entry.borderBoxSize?.[0]?.blockSize ?? target.getBoundingClientRect().height;
        const old = rows.heights.get(key);
        if (old === height) continue;
        const index = rows.indexOf.get(key);
        // A row above the viewport that changed height would move what is read: keep it still.
        if (index !== undefined && (rows.tops[index + 1] ?? 0) <= scrollTop) shiftAbove += height - (old ?? estimate);
        rows.measured(key, height);
        changed = true;
      }
      if (!changed || !el) return;
      if (atBottom.current && stickToBottom) el.scrollTop = el.scrollHeight;
      else if (shiftAbove !== 0) el.scrollTop = scrollTop + shiftAbove;
      rerender();
    });
  }

  useEffect(
    () => () => {
      observer.current?.disconnect();
      cancelAnimationFrame(pendingFrame.current);
    },
    [],
  );

  const measureRef = useCallback((node: HTMLDivElement | null) => {
    if (!node) return;
    observer.current?.observe(node);
    return () => observer.current?.unobserve(node);
  }, []);

  const rows = layout.current;
  const count = rows.update(items, getKey, estimate);
  const { keys, tops: top } = rows;
  const total = top[count] ?? 0;

  const from = Math.max(0, viewport.top - overscanPx);
  const to = viewport.top + viewport.height + overscanPx;
  let start = firstEndingAfter(top, count, from);
  let end = start;
  while (end < count && (top[end] ?? 0) < to) end += 1;
  if (start >= count && count > 0) start = Math.max(0, count - 1);
  end = Math.max(end, Math.min(count, start + 1));

  // At the bottom it sticks; it lets go only when the reader scrolls up (content that
  // grows or is measured taller after a jump to the bottom is not the reader leaving).
  const lastTop = useRef(0);
  const onScroll = useCallback(() => {
    const el = scroller.current;
    if (!el) return;
    if (el.scrollHeight - el.scrollTop - el.clientHeight < 8) atBottom.current = true;
    else if (el.scrollTop < lastTop.current - 2) atBottom.current = false;
    lastTop.current = el.scrollTop;
    setShowJump(stickToBottom && !atBottom.current);
    setViewport((v) => (v.top === el.scrollTop && v.height === el.clientHeight ? v : { top: el.scrollTop, height: el.clientHeight }));
  }, [stickToBottom]);

  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    const resize = new ResizeObserver(() => {
      setViewport({ top: el.scrollTop, height: el.clientHeight });
      if (atBottom.current && stickToBottom) el.scrollTop = el.scrollHeight;
    });
    resize.observe(el);
    return () => resize.disconnect();
  }, [stickToBottom]);

  // After every render: stay at the bottom when the reader was there; else, when rows
  // came in above (the first one changed), keep the row that was at the top where it was.
  const anchor = useRef<{ key: string; offset: number } | null>(null);
  const firstKey = useRef<string | undefined>(undefined);
  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    if (stickToBottom && atBottom.current) {
      if (el.scrollHeight - el.scrollTop - el.clientHeight > 1) el.scrollTop = el.scrollHeight;
    } else if (anchor.current && keys[0] !== firstKey.current) {
      const index = rows.indexOf.get(anchor.current.key);
      if (index !== undefined) {
        const want = (top[index] ?? 0) + anchor.current.offset;
        if (Math.abs(el.scrollTop - want) > 1) el.scrollTop = want;
      }
    }
    firstKey.current = keys[0];
    const first = firstEndingAfter(top, count, el.scrollTop);
    const key = keys[first];
    anchor.current = key === undefined ? null : { key, offset: el.scrollTop - (top[first] ?? 0) };
  });

  const jump = () => {
    const el = scroller.current;
    if (!el) return;
    atBottom.current = true;
    el.scrollTop = el.scrollHeight;
    setShowJump(false);
  };

  const rendered: ReactNode[] = [];
  for (let i = start; i < end; i += 1) {
    rendered.push(
      <div key={keys[i]} data-key={keys[i]} ref={measureRef} className="vrow">
        {render(items[i] as T, i)}
      </div>,
    );
  }

  return (
    <div className={`vlist-wrap ${className ?? ""}`}>
      <div
        ref={scroller}
        className="vlist"
        onScroll={onScroll}
        tabIndex={0}
        role="region"
        aria-label={label}
        data-version={version}
        data-measured={measured}
      >
        <div style={{ paddingTop: top[start] ?? 0, paddingBottom: Math.max(0, total - (top[end] ?? total)) }}>{rendered}</div>
      </div>
      {showJump && (
        <button type="button" className="jump" onClick={jump}>
          Jump to latest
        </button>
      )}
    </div>
  );
}

/** The first index whose row ends after `y` (binary search over the starts). */
function firstEndingAfter(top: Float64Array, count: number, y: number): number {
  let lo = 0;
  let hi = count;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((top[mid + 1] ?? 0) <= y) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
