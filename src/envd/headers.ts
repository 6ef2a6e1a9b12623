/**
 * The `Headers` every reference in envd's bundles resolves to (scripts/build-envd.mjs
 * injects it). Node's own global is undici's: its first use loads undici, node:http2 and
 * node:tls (~35 ms of CPU here) on a sandbox's first request, and a startup snapshot
 * cannot hold them. Written here, not taken from a library: headers-polyfill, the
 * well-kept one, reads `globalThis.Headers` itself, which loads undici all the same.
 * WHATWG semantics (src/envd/headers.test.ts checks them against Node's): names are
 * case-insensitive, iteration is sorted by lower-cased name, values of a repeated name
 * join with ", " except `set-cookie`, which iterates one entry per value.
 */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Leading and trailing HTTP whitespace is dropped; NUL, CR and LF are refused.
const EDGE_WHITESPACE = /^[\t\n\r ]+|[\t\n\r ]+$/g;
const FORBIDDEN_IN_VALUE = /[\0\r\n]/;

function headerName(name: string): string {
  const n = String(name);
  if (!TOKEN.test(n)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(n)}`);
  return n.toLowerCase();
}

function headerValue(value: string): string {
  const v = String(value).replace(EDGE_WHITESPACE, "");
  if (FORBIDDEN_IN_VALUE.test(v)) throw new TypeError(`Headers: invalid header value ${JSON.stringify(v)}`);
  return v;
}

type HeadersInit = ConstructorParameters<typeof globalThis.Headers>[0];

export class Headers {
  readonly #values = new Map<string, string[]>();

  constructor(init?: HeadersInit) {
    if (init === undefined || init === null) return;
    if (typeof (init as Iterable<unknown>)[Symbol.iterator] === "function") {
      for (const pair of init as Iterable<Iterable<string>>) {
        const kv = [...pair];
        if (kv.length !== 2) throw new TypeError("Headers: each init pair must have exactly two items");
        this.append(kv[0]!, kv[1]!);
      }
      return;
    }
    for (const [k, v] of Object.entries(init as Record<string, string>)) this.append(k, v);
  }

  append(name: string, value: string): void {
    const n = headerName(name);
    const v = headerValue(value);
    const vs = this.#values.get(n);
    if (vs) vs.push(v);
    else this.#values.set(n, [v]);
  }

  delete(name: string): void {
    this.#values.delete(headerName(name));
  }

  get(name: string): string | null {
    return this.#values.get(headerName(name))?.join(", ") ?? null;
  }

  getSetCookie(): string[] {
    return [...(this.#values.get("set-cookie") ?? [])];
  }

  has(name: string): boolean {
    return this.#values.has(headerName(name));
  }

  set(name: string, value: string): void {
    this.#values.set(headerName(name), [headerValue(value)]);
  }

  forEach(cb: (value: string, key: string, parent: Headers) => void, thisArg?: unknown): void {
    for (const [k, v] of this.entries()) cb.call(thisArg, v, k, this);
  }

  *entries(): IterableIterator<[string, string]> {
    for (const name of [...this.#values.keys()].sort()) {
      const vs = this.#values.get(name)!;
      if (name === "set-cookie") for (const v of vs) yield [name, v];
      else yield [name, vs.join(", ")];
    }
  }

  *keys(): IterableIterator<string> {
    for (const [k] of this.entries()) yield k;
  }

  *values(): IterableIterator<string> {
    for (const [, v] of this.entries()) yield v;
  }

  [Symbol.iterator](): IterableIterator<[string, string]> {
    return this.entries();
  }

  get [Symbol.toStringTag](): string {
    return "Headers";
  }
}
