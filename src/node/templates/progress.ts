/**
 * A progress display on stderr for long node tasks (template builds): a live line on a
 * TTY, a line every few seconds otherwise (CI logs).
 */
export class Progress {
  private stage = "";
  private readonly started = Date.now();
  private stageStarted = Date.now();
  private timer: NodeJS.Timeout | undefined;
  private readonly tty: boolean;
  private readonly out: NodeJS.WriteStream;

  constructor(private readonly title: string, out: NodeJS.WriteStream = process.stderr) {
    this.out = out;
    this.tty = Boolean(out.isTTY);
    this.timer = setInterval(() => this.render(), this.tty ? 250 : 5000);
    this.timer.unref();
  }

  step(stage: string): void {
    if (this.stage && !this.tty) this.out.write(`${this.title}: ${this.stage} done in ${secs(Date.now() - this.stageStarted)}\n`);
    this.stage = stage;
    this.stageStarted = Date.now();
    this.render(true);
  }

  private render(force = false): void {
    const line = `${this.title}: ${this.stage} … ${secs(Date.now() - this.stageStarted)} (total ${secs(Date.now() - this.started)})`;
    if (this.tty) this.out.write(`\r\x1b[K${line}`);
    else if (force || this.stage) this.out.write(`${line}\n`);
  }

  done(summary: string): void {
    if (this.timer) clearInterval(this.timer);
    this.out.write(`${this.tty ? "\r\x1b[K" : ""}${this.title}: ${summary} in ${secs(Date.now() - this.started)}\n`);
  }

  fail(e: unknown): void {
    if (this.timer) clearInterval(this.timer);
    this.out.write(`${this.tty ? "\r\x1b[K" : ""}${this.title}: failed during ${this.stage}: ${e instanceof Error ? e.message : String(e)}\n`);
  }
}

const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
