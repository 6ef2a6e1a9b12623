/**
 * The one logger factory. JSON lines by default (what log shippers read); `pretty` for
 * people at a terminal (`space up` on a TTY, or SPACE_LOG_FORMAT=pretty), through
 * pino-pretty in this thread (no transport worker: the process stays one thread of
 * work and a crash still prints its last lines). While tracing is on, every line
 * carries the active span's trace_id and span_id.
 */
import { pino, type DestinationStream, type Logger } from "pino";
import { PinoPretty } from "pino-pretty";
import { traceFields, tracingEnabled } from "./tracing.ts";

export type { Logger };

/** Secrets never reach a log line, whatever object they ride in. */
const redactPaths = [
  "apiKey", "*.apiKey", "token", "*.token", "password", "*.password", "secret", "*.secret",
  "envdAccessToken", "*.envdAccessToken", "trafficAccessToken", "*.trafficAccessToken",
  "headers.authorization", "headers[\"x-api-key\"]", "headers[\"x-access-token\"]",
  "req.headers.authorization", "req.headers[\"x-api-key\"]", "req.headers[\"x-access-token\"]",
  "envVars", "*.envVars", "envs", "*.envs",
];

export type LogFormat = "auto" | "json" | "pretty";

/** `auto` is pretty exactly when stdout is a terminal. */
export function resolveLogFormat(format: LogFormat, stdoutIsTty: boolean): "json" | "pretty" {
  return format === "auto" ? (stdoutIsTty ? "pretty" : "json") : format;
}

export function createLogger(level: string, name: string, format: "json" | "pretty" = "json"): Logger {
  const options = {
    level,
    name,
    redact: { paths: redactPaths, censor: "[redacted]" },
    ...(tracingEnabled() ? { mixin: traceFields } : {}),
  };
  if (format === "json") return pino(options);
  // Colours only where the output is a terminal (pino-pretty's own check), not in a forced-pretty pipe.
  const pretty: DestinationStream = PinoPretty({ sync: true, translateTime: "SYS:HH:MM:ss.l", ignore: "pid,hostname" });
  return pino(options, pretty);
}
