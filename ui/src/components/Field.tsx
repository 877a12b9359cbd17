import { cloneElement, type ReactElement, useId } from "react";

/**
 * A label and its control, tied by id (not by wrapping: a wrapped select would have
 * its chosen option read as part of its own name).
 */
export function Field({ label, children, className }: { label: string; children: ReactElement<{ id?: string }>; className?: string }) {
  const id = useId();
  return (
    <div className={`field ${className ?? ""}`}>
      <label htmlFor={id}>{label}</label>
      {cloneElement(children, { id })}
    </div>
  );
}
