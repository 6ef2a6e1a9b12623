// A shell in the sandbox: xterm.js over envd's PTY (process.Process/Start with a pty).
import { useEffect, useRef, useState } from "preact/hooks";
import { Terminal as Xterm } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { startPty, type EnvdTarget } from "../envd.ts";
import { ErrorLine } from "../ui.tsx";

export function Terminal({ target }: { target: EnvdTarget }) {
  const host = useRef<HTMLDivElement>(null);
  const [error, setError] = useState<string | null>(null);
  const [status, setStatus] = useState("connecting");
  useEffect(() => {
    if (!host.current || !target.accessToken) return;
    const term = new Xterm({ convertEol: false, fontSize: 14, scrollback: 5000, screenReaderMode: true });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host.current);
    fit.fit();
    const pty = startPty(target, term.cols, term.rows, (bytes) => term.write(bytes));
    pty.pid.then(
      () => setStatus("connected"),
      (e: Error) => setError(e.message),
    );
    pty.done.then(
      () => setStatus("ended"),
      (e: Error) => setError(e.message),
    );
    const input = term.onData((d) => void pty.write(d).catch((e: Error) => setError(e.message)));
    const resize = new ResizeObserver(() => {
      fit.fit();
      void pty.resize(term.cols, term.rows).catch(() => {});
    });
    resize.observe(host.current);
    term.focus();
    return () => {
      resize.disconnect();
      input.dispose();
      pty.close();
      term.dispose();
    };
  }, [target.sandboxId, target.accessToken, target.sandboxUrl]);
  return (
    <section aria-label="Terminal">
      <p role="status" data-terminal-status={status}>
        Terminal: {target.accessToken ? status : "waiting for the sandbox's envd token"}
      </p>
      <ErrorLine error={error} />
      <div ref={host} class="terminal" data-testid="terminal" />
    </section>
  );
}
