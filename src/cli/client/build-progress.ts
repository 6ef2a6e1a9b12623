/**
 * Progress of a template build on stderr: on a terminal a cli-progress bar over the
 * build's `[k/n]` steps with the log lines scrolling above it; otherwise (a pipe, CI) the
 * plain line-per-stage `Progress` and the log lines as they come.
 */
import { MultiBar, Presets, type SingleBar } from "cli-progress";
import { Progress } from "../../node/templates/progress.ts";

export interface BuildProgress {
  step(stage: string): void;
  log(line: string): void;
  done(summary: string): void;
  fail(e: unknown): void;
}

const STEP = /^(?:CACHED )?\[(\d+)\/(\d+)\]/;

export function buildProgress(title: string, out: NodeJS.WriteStream): BuildProgress {
  if (!out.isTTY) {
    const p = new Progress(title, out);
    return {
      step: (s) => p.step(s),
      log: (line) => {
        out.write(`${line}\n`);
        const message = line.replace(/^\[[^\]]*\] /, "");
        if (STEP.test(message)) p.step(message.slice(0, 60));
      },
      done: (s) => p.done(s),
      fail: (e) => p.fail(e),
    };
  }
  const started = Date.now();
  const multi = new MultiBar({ stream: out, format: `${title} [{bar}] {value}/{total} {stage}`, hideCursor: true, clearOnComplete: true, barsize: 24 }, Presets.shades_classic);
  const bar: SingleBar = multi.create(1, 0, { stage: "" });
  const secs = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
  return {
    step: (stage) => bar.update({ stage }),
    log: (line) => {
      multi.log(`${line}\n`);
      const m = STEP.exec(line.replace(/^\[[^\]]*\] /, ""));
      if (m) {
        bar.setTotal(Number(m[2]));
        bar.update(Number(m[1]), { stage: line.replace(/^\[[^\]]*\] /, "").slice(0, 50) });
      }
    },
    done: (summary) => {
      multi.stop();
      out.write(`${title}: ${summary} in ${secs()}\n`);
    },
    fail: (e) => {
      multi.stop();
      out.write(`${title}: failed after ${secs()}: ${e instanceof Error ? e.message : String(e)}\n`);
    },
  };
}
