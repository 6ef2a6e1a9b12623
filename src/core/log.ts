import { pino, type Logger } from "pino";

export type { Logger };

/** Secrets never reach a log line, whatever object they ride in. */
const redactPaths = [
  "apiKey", "*.apiKey", "token", "*.token", "password", "*.password", "secret", "*.secret",
  "envdAccessToken", "*.envdAccessToken", "trafficAccessToken", "*.trafficAccessToken",
  "headers.authorization", "headers[\"x-api-key\"]", "headers[\"x-access-token\"]",
  "req.headers.authorization", "req.headers[\"x-api-key\"]", "req.headers[\"x-access-token\"]",
  "envVars", "*.envVars", "envs", "*.envs",
];

export function createLogger(level: string, name: string): Logger {
  return pino({ level, name, redact: { paths: redactPaths, censor: "[redacted]" } });
}
