// Small shared pieces: the hash route, a confirmation dialog, an error line, a read's states, a chart.
import { useEffect, useRef, useState } from "preact/hooks";
import type { ComponentChildren } from "preact";

export function useRoute(): string {
  const [route, setRoute] = useState(location.hash.slice(1) || "/");
  useEffect(() => {
    const on = () => setRoute(location.hash.slice(1) || "/");
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}

export function ErrorLine({ error }: { error: string | null }) {
  return error ? (
    <p role="alert" class="error">
      {error}
    </p>
  ) : null;
}

/** What a read gave: its error, then "Loading…" until the first value, then `children` of it; `refresh` adds a button that reads again. */
export function Loaded<T>(props: { value: T | null; error: string | null; refresh?: () => void; children: (value: T) => ComponentChildren }) {
  return (
    <>
      {props.refresh ? (
        <div class="row">
          <button type="button" onClick={props.refresh}>
            Refresh
          </button>
        </div>
      ) : null}
      <ErrorLine error={props.error} />
      {props.value === null ? <p aria-busy="true">Loading…</p> : props.children(props.value)}
    </>
  );
}

/** An action behind a confirmation: a modal dialog the keyboard can answer (Escape cancels). */
export function Confirm(props: { label: string; question: string; onConfirm: () => Promise<void>; danger?: boolean }) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  return (
    <>
      <button type="button" class={props.danger ? "danger" : ""} onClick={() => dialog.current?.showModal()}>
        {props.label}
      </button>
      <dialog ref={dialog} aria-label={props.question}>
        <p>{props.question}</p>
        <ErrorLine error={error} />
        <div class="row">
          <button type="button" onClick={() => dialog.current?.close()}>
            Cancel
          </button>
          <button
            type="button"
            class={props.danger ? "danger" : "primary"}
            disabled={busy}
            onClick={async () => {
              setBusy(true);
              setError(null);
              try {
                await props.onConfirm();
                dialog.current?.close();
              } catch (e) {
                setError((e as Error).message);
              } finally {
                setBusy(false);
              }
            }}
          >
            Confirm {props.label.toLowerCase()}
          </button>
        </div>
      </dialog>
    </>
  );
}

export function Section(props: { title: string; children: ComponentChildren }) {
  return (
    <section aria-label={props.title}>
      <h2>{props.title}</h2>
      {props.children}
    </section>
  );
}

/** A line chart of one series (an SVG with a text summary for screen readers). */
export function Chart(props: { title: string; unit: string; points: Array<{ t: number; v: number }>; max?: number }) {
  const w = 320;
  const h = 80;
  const pts = props.points;
  const last = pts.at(-1)?.v;
  const max = props.max ?? Math.max(1, ...pts.map((p) => p.v));
  const t0 = pts[0]?.t ?? 0;
  const span = Math.max(1, (pts.at(-1)?.t ?? 1) - t0);
  const d = pts
    .map((p, i) => `${i ? "L" : "M"}${(((p.t - t0) / span) * w).toFixed(1)},${(h - (p.v / max) * h).toFixed(1)}`)
    .join(" ");
  const summary = last === undefined ? "no samples yet" : `latest ${last.toFixed(1)} ${props.unit}, ${pts.length} samples`;
  return (
    <figure class="chart">
      <figcaption>
        {props.title}: {summary}
      </figcaption>
      <svg viewBox={`0 0 ${w} ${h}`} width={w} height={h} role="img" aria-label={`${props.title}: ${summary}`}>
        <rect x="0" y="0" width={w} height={h} class="bg" />
        {pts.length > 1 ? <path d={d} class="line" /> : null}
      </svg>
    </figure>
  );
}

export const fmtTime = (iso: string | null | undefined) => (iso ? new Date(iso).toLocaleString() : "—");
