/** An errno's name (`ENOENT`), for messages that report a system call's failure; `errno N` for one Node.js does not name. */
import { constants } from "node:os";

const NAMES = new Map(Object.entries(constants.errno).map(([name, n]) => [n, name]));

export function errnoName(errno: number): string {
  return NAMES.get(errno) ?? `errno ${errno}`;
}
