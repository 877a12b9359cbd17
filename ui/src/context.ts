import { createContext, useContext } from "react";
import type { Connection } from "./api/connection";

export const ConnectionContext = createContext<Connection | null>(null);

export function useConnection(): Connection {
  const connection = useContext(ConnectionContext);
  if (!connection) throw new Error("not connected");
  return connection;
}
