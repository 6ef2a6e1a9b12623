/**
 * Configuration: one schema per variable, parsed once in a process's main() and passed
 * down. A wrong value stops startup with the variable, the value and what is allowed.
 * No other module reads process.env.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { isIpv4, isIpv4Cidr } from "./cidr.ts";
import { parseInsecure, parseMirrors } from "./registry-lists.ts";

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

const int = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .regex(/^-?\d+$/, `an integer from ${min} to ${max}`)
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(min, `an integer from ${min} to ${max}`)
        .max(max, `an integer from ${min} to ${max}`),
    );
/** A number from 0 to 1, e.g. 0.40. */
const fraction = () =>
  z
    .string()
    .regex(/^(0(\.\d+)?|1(\.0+)?)$/, "a fraction from 0 to 1 such as 0.40")
    .transform(Number);
const bool = () =>
  z.enum(["true", "false", "1", "0"], { message: "true|false" }).transform((v) => v === "true" || v === "1");
const oneOf = <T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { message: `one of ${values.join("|")} (case-sensitive)` });
const url = () => z.string().regex(/^$|^https?:\/\/[^\s/]+(\/[^\s]*)?$/, "an http(s) URL such as http://127.0.0.1:3000, or empty");
/** A comma-separated list of IPv4 addresses / CIDRs (empty = none), parsed to an array. */
const cidrList = () =>
  z
    .string()
    .refine((v) => v.trim() === "" || v.split(",").every((x) => isIpv4Cidr(x.trim())), "a comma-separated list of IPv4 addresses or CIDRs such as 10.0.0.5,192.168.0.0/16, or empty")
    .transform((v) => v.split(",").map((x) => x.trim()).filter(Boolean));
/** `ip` or `ip:port` of a DNS server (empty = none). */
const dnsServer = () =>
  z.string().refine((v) => {
    if (v === "") return true;
    const [host, port, extra] = v.split(":");
    return extra === undefined && !!host && isIpv4(host) && (port === undefined || (/^\d{1,5}$/.test(port) && Number(port) >= 1 && Number(port) <= 65535));
  }, "an IPv4 address with an optional port such as 10.0.0.2 or 10.0.0.2:5353, or empty");
const path = () => z.string().min(1, "a non-empty path");
/** `host[:port],…` (empty = none), parsed to an array. */
const hostList = () =>
  z.string().transform((v, ctx) => {
    try {
      return parseInsecure(v);
    } catch (e) {
      ctx.addIssue({ code: "custom", message: `a comma-separated list of host[:port] such as 127.0.0.1:5000,registry.lan (${(e as Error).message})` });
      return z.NEVER;
    }
  });
/** `registry=mirror[|mirror…],…` (empty = none), parsed to registry → mirrors. */
const mirrorList = () =>
  z.string().transform((v, ctx) => {
    try {
      return parseMirrors(v);
    } catch (e) {
      ctx.addIssue({ code: "custom", message: `registry=mirror[|mirror…],… such as docker.io=mirror.lan:5000 (${(e as Error).message})` });
      return z.NEVER;
    }
  });

/** Every SPACE_* variable: [schema, default (as the string a user would type), what it is]. */
const vars = {
  SPACE_DATA_DIR: [path(), join(homedir(), ".space"), "data directory of `space up` (database, blobs, node state)"],
  SPACE_DATABASE_URL: [z.string().regex(/^$|^(postgres(ql)?:\/\/|pglite:)/, "postgres://… or pglite:<dir>"), "", "Postgres URL; empty = PGlite in the data directory"],
  SPACE_BLOB_URL: [z.string().regex(/^$|^(s3:\/\/[^/]+|file:\/\/\/|\/)/, "s3://bucket/prefix, file:///dir or /dir"), "", "blob store; empty = <data dir>/blobs"],
  SPACE_S3_ENDPOINT: [url(), "", "S3 endpoint URL (for S3-compatible servers)"],
  SPACE_S3_REGION: [z.string().min(1), "us-east-1", "S3 region"],
  SPACE_S3_ACCESS_KEY_ID: [z.string(), "", "S3 access key id (empty = the AWS default chain)"],
  SPACE_S3_SECRET_ACCESS_KEY: [z.string(), "", "S3 secret access key"],
  SPACE_S3_FORCE_PATH_STYLE: [bool(), "true", "path-style S3 addressing (MinIO, s3rver)"],
  SPACE_LOG_LEVEL: [oneOf(["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const), "info", "log level"],
  SPACE_LOG_FORMAT: [oneOf(["auto", "json", "pretty"] as const), "auto", "log lines: json, pretty (for people), auto = pretty when stdout is a terminal"],
  OTEL_EXPORTER_OTLP_ENDPOINT: [url(), "", "OpenTelemetry: OTLP/HTTP base URL traces go to (<it>/v1/traces); empty = tracing off"],
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: [url(), "", "OpenTelemetry: full OTLP/HTTP traces URL, overrides OTEL_EXPORTER_OTLP_ENDPOINT"],
  OTEL_SERVICE_NAME: [z.string(), "", "OpenTelemetry service.name; empty = space-<process> (space-up, space-api, space-controller, space-node)"],
  SPACE_SUBSTRATE: [oneOf(["direct", "kubernetes"] as const), "direct", "how sandboxes are placed"],
  SPACE_ENVIRONMENT_PLACEMENT_GATE: [oneOf(["off", "shadow", "on"] as const), "off", "execution-environment placement gate"],
  SPACE_KUBE_CONFIG: [z.string(), "", "SPACE_SUBSTRATE=kubernetes: kubeconfig file; empty = in-cluster service account"],
  SPACE_KUBE_NAMESPACE: [z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "a namespace name"), "space-sandboxes", "SPACE_SUBSTRATE=kubernetes: namespace of sandbox pods"],
  SPACE_KUBE_READY_DEADLINE_MS: [int(1000), "120000", "SPACE_SUBSTRATE=kubernetes: how long a sandbox pod may take to be scheduled, then to be ready"],
  SPACE_API_HOST: [z.string().min(1), "127.0.0.1", "API listen address"],
  SPACE_API_PORT: [int(0, 65535), "3000", "API listen port (ECW, Native, Admin, metrics)"],
  SPACE_GATEWAY_PORT: [int(0, 65535), "3001", "sandbox gateway port (envd and public ports)"],
  SPACE_PUBLIC_API_URL: [url(), "", "URL users reach the API at; empty = http://<host>:<port>"],
  SPACE_PUBLIC_GATEWAY_URL: [url(), "", "URL users reach the gateway at; empty = http://<host>:<gateway port>"],
  SPACE_API_URL: [url(), "", "client commands (`space sandbox …`, `space tenant …`): the API to talk to; empty = $E2B_API_URL, then the local `space up`'s (docs/cli.md)"],
  SPACE_SANDBOX_URL: [url(), "", "client commands: the sandbox gateway (envd) to talk to; empty = $E2B_SANDBOX_URL, then the local `space up`'s"],
  SPACE_SANDBOX_DOMAIN: [z.string(), "", "wildcard domain for <port>-<id>.<domain> public port URLs (getHost); empty = localhost:<gateway port> under space up (reachable on this machine), none under space api"],
  SPACE_GATEWAY_TLS_CERT: [z.string(), "", "PEM certificate chain file: the gateway serves TLS, h2 and HTTP/1.1 by ALPN; empty = plain HTTP/1.1 and h2c"],
  SPACE_GATEWAY_TLS_KEY: [z.string(), "", "PEM private key file of SPACE_GATEWAY_TLS_CERT"],
  SPACE_ADMIN_TOKEN: [z.string(), "", "admin token; empty = generated once and kept in the data directory"],
  SPACE_INTERNAL_TOKEN: [z.string(), "", "token between control plane and nodes; empty = generated once and kept"],
  SPACE_METRICS_TOKEN: [z.string(), "", "bearer token `GET /metrics` requires (API, controller and node-api); empty = /metrics is open to anyone who reaches the port"],
  SPACE_CONTROLLER_TICK_MS: [int(1, 60_000), "25", "dispatcher claim tick behind NOTIFY (on PGlite at least a quarter of the claim staleness: its NOTIFY is never lost)"],
  SPACE_CONTROLLER_CLAIM_LIMIT: [int(1, 1000), "16", "operations claimed per tick"],
  SPACE_CONTROLLER_CLAIM_STALE_MS: [int(1000, 86_400_000), "60000", "re-claim an operation whose claimer went silent this long"],
  SPACE_CONTROLLER_METRICS_PORT: [int(0, 65535), "0", "controller metrics port for `space controller` and `space up` (0 = none)"],
  SPACE_CENSUS_INTERVAL_MS: [int(1000, 3_600_000), "60000", "how often the controller leader reports the environment placement census (gate shadow|on)"],
  SPACE_NODE_DIR: [z.string(), "", "node state directory; empty = <data dir>/node"],
  SPACE_NODE_NAME: [z.string(), "", "node name; empty = host name"],
  SPACE_NODE_HOST: [z.string().min(1), "127.0.0.1", "node-api listen address"],
  SPACE_NODE_PORT: [int(0, 65535), "3002", "node-api listen port"],
  SPACE_NODE_ADVERTISE_URL: [url(), "", "URL the control plane reaches this node at; empty = http://<host>:<port>"],
  SPACE_NODE_GROUP: [z.string(), "default", "node group"],
  SPACE_NODE_CONTROL_URL: [url(), "", "control-plane URL a standalone `space node` registers with"],
  SPACE_NODE_LABELS: [z.string().regex(/^$|^[A-Za-z0-9._/-]+=[A-Za-z0-9._-]*(,[A-Za-z0-9._/-]+=[A-Za-z0-9._-]*)*$/, "key=value,key2=value2"), "", "node labels published at registration (matched by placement node selectors)"],
  SPACE_NODE_REGISTER_DEADLINE_MS: [int(1000, 86_400_000), "300000", "a standalone node retries registration (with backoff) until this deadline, then exits"],
  SPACE_NODE_LABEL_PREFIXES: [z.string().regex(/^$|^[A-Za-z0-9._/-]+(,[A-Za-z0-9._/-]+)*$/, "comma-separated label-key prefixes such as space.dev/,zone"), "", "label fence: label-key prefixes a node may publish about itself at registration (others are refused and the node registers without them); empty = any"],
  SPACE_NODE_HEARTBEAT_GRACE_MS: [int(0, 3_600_000), "0", "a node silent this long becomes unavailable and its sandboxes are reported lost; 0 = 3 heartbeat intervals"],
  SPACE_NODE_BRIDGE: [z.string().regex(/^$|^[a-z][a-z0-9_-]{0,14}$/, "an interface name of at most 15 characters"), "", "host scope: the node's bridge; empty = space0 (one node per host)"],
  SPACE_NODE_NFT_TABLE: [z.string().regex(/^$|^[a-z][a-z0-9_]{0,30}$/, "an nft table name"), "", "host scope: the node's nft table; empty = space"],
  SPACE_NODE_VETH_PREFIX: [z.string().regex(/^$|^[a-z][a-z0-9]{0,3}$/, "1-4 lowercase letters/digits"), "", "host scope: prefix of the node's veth names; empty = vs"],
  SPACE_NODE_CGROUP_PARENT: [z.string().regex(/^$|^[a-z][a-z0-9_.-]{0,62}$/, "a cgroup directory name"), "", "host scope: the node's cgroup parent; empty = space"],
  SPACE_NODE_RUNTIME_STATE_DIR: [z.string(), "", "host scope: runc/crun state dir (the node reclaims every container listed there); empty = /run/space/runc; on tmpfs (the node mounts one there, or on a dir in its data dir, when it is not on one)"],
  SPACE_PLACEMENT_DIRECTORY_MAX_AGE_MS: [int(0, 60_000), "1000", "Direct placement decides on a snapshot of the node rows at most this old (one read shared by every create; a refusal is re-checked on fresh rows); 0 = read every row per decision"],
  SPACE_PLACEMENT_VCPU_OVERCOMMIT: [int(1, 64), "8", "Kubernetes allocatable: vCPUs a node publishes per host CPU (Direct placement admits by SPACE_CAPACITY_* instead)"],
  SPACE_PLACEMENT_MEMORY_OVERCOMMIT: [int(1, 8), "2", "Kubernetes allocatable and the warm-pool memory budget: memory per MiB of host memory (Direct placement admits by SPACE_CAPACITY_* instead)"],
  SPACE_CAPACITY_CPU_REQUEST_MILLI: [int(0, 1000), "1", "capacity (docs/capacity.md): milli-CPUs admission counts per sandbox vCPU; the vCPUs themselves are the sandbox's limit and weight"],
  SPACE_CAPACITY_MEMORY_REQUEST_MIB: [int(1, 1_048_576), "32", "capacity: working set counted for a sandbox placed since the node last measured (at most its memory limit)"],
  SPACE_CAPACITY_MEMORY_TARGET_PERCENT: [int(10, 100), "85", "capacity: share of host memory that may be in use (measured + estimated) after an admission"],
  SPACE_CAPACITY_MEMORY_PRESSURE_PERCENT: [int(1, 100), "20", "capacity: memory pressure (PSI some avg10, percent) at or above which a node takes no sandbox"],
  SPACE_CAPACITY_MEMORY_LIMIT_PERCENT: [int(10, 100), "92", "capacity: share of host memory past which a node takes no sandbox, not even in place of one that ended while the node was past its target"],
  SPACE_CAPACITY_DISK_REQUEST_MIB: [int(0, 10_000_000), "64", "capacity: disk counted for a sandbox placed since the thin pool was last measured (at most its disk)"],
  SPACE_PLACEMENT_NODE_SELECTOR: [z.string().regex(/^$|^[A-Za-z0-9._/-]+=[A-Za-z0-9._-]*(,[A-Za-z0-9._/-]+=[A-Za-z0-9._-]*)*$/, "key=value,key2=value2"), "", "node selector extras every sandbox must match (added to each create's own selector)"],
  SPACE_RUNTIME: [oneOf(["runc", "crun", "process"] as const), "runc", "sandbox runtime; `process` isolates nothing"],
  SPACE_NODE_BTRFS_PATH: [z.string(), "", "existing btrfs mount for the node cache; empty = a loop image under the node dir"],
  SPACE_NODE_BTRFS_IMAGE_GIB: [int(1, 100_000), "64", "size of the node cache loop image (sparse)"],
  SPACE_NODE_DISK_RESERVE_MIB: [int(0, 10_000_000), "8192", "disk kept free by admission"],
  SPACE_NODE_WARM_DISKS: [int(0, 64), "2", "sandbox disks made ahead per template a create used on this node, and per template capture after boot restored here (a create takes one instead of waiting for a btrfs snapshot); 0 = none"],
  SPACE_NODE_SLOT_CIDR: [z.string().regex(/^\d+\.\d+\.\d+\.\d+\/\d+$/, "a CIDR such as 10.200.0.0/16"), "10.200.0.0/16", "sandbox address range"],
  SPACE_NODE_MAX_SLOTS: [int(1, 60_000), "1000", "max network slots (advertised capacity)"],
  SPACE_NODE_BOOT_CONCURRENCY: [int(0, 1024), "0", "sandboxes a node starts at once (runtime start to envd ready; the rest wait their turn, creates before warm-pool refills); 0 = twice the CPUs"],
  SPACE_NODE_DNS_UPSTREAM: [dnsServer(), "", "where the node resolver forwards sandboxes' DNS queries (ip or ip:port); empty = the first nameserver of /etc/resolv.conf"],
  SPACE_NODE_GUARDRAILS: [cidrList(), "", "extra destinations no sandbox may reach whatever its policy (e.g. the control plane, the machine network), comma-separated IPv4/CIDRs"],
  SPACE_NODE_GUARDRAIL_EXCEPTIONS: [cidrList(), "", "destinations exempt from the platform guardrails (then judged by each sandbox's policy like any other), comma-separated IPv4/CIDRs; e.g. a metadata service the operator wants reachable"],
  SPACE_TEMPLATE_CACHE_TARGET_MIB: [int(1, 100_000_000), "20480", "template cache size (MiB of template rootfs) above which a node evicts least-recently-used templates"],
  SPACE_TEMPLATE_GC_INTERVAL_S: [int(1, 86_400), "300", "how often a node runs template cache GC (catalog deletions, LRU eviction) and prefetch"],
  SPACE_TEMPLATE_GC_GRACE_S: [int(0, 31_536_000), "1800", "a template deleted from the catalog stays on a node until unused this long"],
  SPACE_TEMPLATE_PREFETCH: [int(0, 100), "5", "newest builds per template each node keeps pulled"],
  SPACE_NODE_NETWORK_POOL_TARGET: [int(0, 10_000), "0", "warm network slots to keep"],
  SPACE_NODE_NETWORK_POOL_RETAIN_READY: [int(0, 10_000), "0", "released slots kept ready for reuse"],
  SPACE_NODE_NETWORK_POOL_MIN_READY: [int(0, 10_000), "0", "slots below which the pool reports unhealthy"],
  SPACE_NODE_SNAPSHOT_STAGING_DIR: [z.string(), "", "tmpfs dir memory images are dumped into before they move to the node's disk; empty = /dev/shm/space-staging-<hash of the node dir>"],
  SPACE_NODE_SNAPSHOT_STAGING_MIB: [int(0, 1_048_576), "2048", "MiB of memory images staged at once (a capture counts its sandbox's memory limit); beyond it a dump goes to disk; 0 = never staged"],
  SPACE_NODE_SLOT_KEEP_MS: [int(0, 600_000), "5000", "ms a suspended sandbox's network slot stays set up, and its disk stays (a full snapshot's), for a restore of it on this node (pause, then connect), as a fork's made beside its capture wait for the fork's restore; 0 = released at the suspend, forks make theirs in the restore"],
  SPACE_NODE_BOOT_CAPTURE: [bool(), "true", "cold creates restore a checkpoint of their template booted on this node (made behind the first cold create of each template; runc with CRIU only) instead of booting it: less CPU, envd's code already compiled; false = every cold create boots"],
  SPACE_NODE_CGROUP_FAVOR_DYNMODS: [bool(), "true", "remount the host's cgroup2 hierarchy with favordynmods (Linux 6.0+): moving a sandbox's first process into its cgroups no longer waits for an RCU grace period (~9 ms of each start and restore); host-wide, until reboot"],
  SPACE_NODE_RELEASE_ON_STOP: [bool(), "false", "on stop, kill this node's sandboxes and remove its host objects (bridge, nft tables, cache mount): retiring a host, or test stacks; default keeps sandboxes running for the next start to adopt"],
  SPACE_NODE_HEARTBEAT_MS: [int(100, 600_000), "5000", "node-ctl heartbeat interval"],
  SPACE_NODE_MEMORY_CHECK_MS: [int(0, 60_000), "250", "how often the node reads host memory between heartbeats; it beats at once when memory moved by SPACE_CAPACITY_MEMORY_REQUEST_MIB since its last; 0 = only on the interval"],
  SPACE_METRICS_INTERVAL_MS: [int(1000, 600_000), "5000", "how often a node samples each running sandbox's metrics and pulls its envd log lines (E2B samples every 5 s)"],
  SPACE_NODE_HEALTH_INTERVAL_MS: [int(500, 600_000), "5000", "how often a node checks that each running sandbox's envd answers (a log pull, 2 s timeout; a lost link or a stopped envd fails it)"],
  SPACE_NODE_HEALTH_THRESHOLD: [int(0, 1000), "3", "consecutive failed envd checks after which a node reports a running sandbox unhealthy: it becomes `failed` (reason named) and is killed; 0 turns the watchdog off"],
  SPACE_METRICS_SAMPLES: [int(1, 100_000), "720", "metrics samples a node keeps per sandbox (720 at 5 s = the last hour), in memory"],
  SPACE_SANDBOX_LOG_ENTRIES: [int(1, 100_000), "1000", "log entries kept per sandbox, in envd's ring and in the node's copy (<node dir>/sandbox-logs); the oldest go first"],
  SPACE_SANDBOX_LOG_RETENTION_S: [int(0, 31_536_000), "3600", "how long a node keeps a sandbox's logs and metrics history after it left the node (killed, paused)"],
  SPACE_DEFAULT_VCPU: [int(1, 256), "2", "vCPUs of a sandbox that asks for none"],
  SPACE_DEFAULT_MEMORY_MIB: [int(64, 1_048_576), "1024", "memory of a sandbox that asks for none"],
  SPACE_DEFAULT_DISK_MIB: [int(64, 10_000_000), "2048", "disk of a sandbox that asks for none"],
  SPACE_QUOTA_SANDBOXES: [int(0, 10_000_000), "10000", "per-tenant quota: live sandboxes (creating, running, paused in memory, or moving between those; suspended and stopped ones do not count); a tenant's admin override wins"],
  SPACE_QUOTA_VCPU: [int(0, 100_000_000), "40000", "per-tenant quota: vCPUs of its live sandboxes"],
  SPACE_QUOTA_MEMORY_MIB: [int(0, 2_000_000_000), "40960000", "per-tenant quota: memory (MiB) of its live sandboxes"],
  SPACE_QUOTA_DISK_MIB: [int(0, 2_000_000_000), "200000000", "per-tenant quota: disk (MiB) of its live sandboxes"],
  SPACE_QUOTA_SNAPSHOTS: [int(0, 10_000_000), "10000", "per-tenant quota: named snapshots kept"],
  SPACE_QUOTA_VOLUMES: [int(0, 10_000_000), "1000", "per-tenant quota: volumes kept"],
  SPACE_QUOTA_VOLUME_MIB: [int(0, 2_000_000_000), "10240000", "per-tenant quota: summed size (MiB) of its volumes"],
  SPACE_VOLUME_DEFAULT_MIB: [int(16, 16_777_216), "10240", "size (MiB) of a volume created without one (E2B's create has no size)"],
  SPACE_RATE_LIMIT_CREATES_PER_S: [int(0, 1_000_000), "200", "creates (and forks) per second per tenant, refilled continuously (token bucket); 0 = no limit"],
  SPACE_RATE_LIMIT_CREATE_BURST: [int(1, 1_000_000), "1000", "creates a tenant may make at once on a full bucket"],
  SPACE_RATE_LIMIT_KEY_CREATES_PER_S: [int(0, 1_000_000), "200", "creates per second per API key or token; 0 = no limit"],
  SPACE_RATE_LIMIT_KEY_CREATE_BURST: [int(1, 1_000_000), "1000", "creates one API key or token may make at once on a full bucket"],
  SPACE_RATE_LIMIT_DATABASE_URL: [z.string().regex(/^$|^(postgres(ql)?:\/\/|pglite:)/, "postgres://… or pglite:<dir>"), "", "where the rate limiter keeps its buckets; empty = the main database. When it cannot be reached the limiter lets creates through (fails open) and counts them in space_rate_limiter_fail_open_total"],
  SPACE_CAPACITY_RETRY_AFTER_S: [int(1, 3600), "5", "Retry-After (seconds) of a create refused because no node has room (429)"],
  SPACE_WARM_POOLS: [z.string().regex(/^$|^[A-Za-z0-9._:/-]+=\d+(\.\.\d+)?(:\d+\/\d+\/\d+)?(,[A-Za-z0-9._:/-]+=\d+(\.\.\d+)?(:\d+\/\d+\/\d+)?)*$/, "template=size[..maxSize][:vcpu/memoryMib/diskMib],…"), "", "warm pools kept by the controller, e.g. base=5, or base=5..50 to grow for a burst (admin API pools of the same name win); empty = none"],
  SPACE_WARM_POOL_IDLE_POLICY: [
    oneOf(["running", "suspended", "suspend_when_memory_short"] as const),
    "running",
    "what idle warm members do, for pools that do not set it: stay running, stay suspended on their node, or be suspended while their node is short of memory",
  ],
  SPACE_WARM_POOL_MIN_FREE_MEMORY_PERCENT: [int(0, 100), "20", "suspend_when_memory_short: a node with less free memory than this share of its budget (memory × overcommit) is short"],
  SPACE_WARM_POOL_REFILL_QUIET_MS: [int(0, 60_000), "500", "a pool's refill starts once no member was adopted for this long (a burst's adoptions keep the cores; 0 = refill at once)"],
  SPACE_WARM_POOL_DEMAND_WINDOW_S: [int(1, 86_400), "120", "a pool with a max size grows to the creates of its template and shape in this window (at most its max size) and shrinks back as they age out"],
  SPACE_WARM_POOL_REFILL_MAX_DEFER_MS: [int(0, 600_000), "3000", "the longest a refill waits for adoptions to be quiet (a steady stream of creates still gets members)"],
  SPACE_DEBIAN_MIRROR: [url(), "", "Debian mirror for the base template; empty = the machine's apt sources"],
  SPACE_REGISTRY_AUTH_FILE: [z.string(), "", "credentials a node uses for registry pulls (containers-auth.json, as `skopeo login` or `docker login` write it); a build's own fromImage credentials win for their registry; empty = none"],
  SPACE_REGISTRY_INSECURE: [hostList(), "", "registries pulled over plain HTTP or unverified TLS, e.g. 127.0.0.1:5000,registry.lan; empty = none"],
  SPACE_REGISTRY_MIRRORS: [mirrorList(), "", "registry mirrors tried before the registry, e.g. docker.io=mirror.lan:5000|mirror2.lan; empty = none"],
  SPACE_REGISTRY_ECR_ENDPOINT: [z.string(), "", "where the control plane exchanges fromAWSRegistry keys for an ECR registry token (GetAuthorizationToken), e.g. a VPC endpoint https://api.ecr.eu-west-1.vpce.amazonaws.com/; empty = https://api.ecr.<region>.amazonaws.com/"],
  SPACE_REGISTRY_INSPECT_TIMEOUT_S: [int(1, 600), "20", "how long a node waits for a registry to name an image's manifest before the build request fails (an unreachable registry)"],
  SPACE_EXTRA_CA_CERTS: [z.string(), "", "PEM bundle of CA certificates nodes trust besides the system's (registry pulls; also in build containers and sandboxes with SPACE_EXTRA_CA_CERTS_IN_SANDBOXES); empty = none"],
  SPACE_EXTRA_CA_CERTS_IN_SANDBOXES: [bool(), "false", "append SPACE_EXTRA_CA_CERTS to the trust store of build containers and sandboxes (/etc/ssl/certs/ca-certificates.crt, SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, PIP_CERT)"],
  SPACE_BASE_TEMPLATE_DIR: [z.string(), "", "where the base template tarball is built and cached (once per machine, named by its recipe digest); empty = <repo>/.tools/templates"],
  SPACE_ENCRYPTION_KEY: [z.string().regex(/^$|^[0-9a-f]{64}$/, "64 hex characters (a 256-bit key) or empty"), "", "cluster key wrapping snapshot data keys; empty = no encryption"],
  SPACE_ENCRYPTION_KEY_PREVIOUS: [z.string().regex(/^$|^[0-9a-f]{64}$/, "64 hex characters (a 256-bit key) or empty"), "", "the cluster key before a rotation: nodes still unwrap what it wrapped, and `space rotate-key` re-wraps that under SPACE_ENCRYPTION_KEY; empty = none"],
  SPACE_SNAPSHOT_REAPER_TARGET: [fraction(), "0.40", "node cache usage (fraction of its disk) above which the node frees local snapshot copies already durable in the blob store, least recently used first"],
  SPACE_SNAPSHOT_REAPER_INTERVAL_S: [int(1, 86_400), "300", "how often the node's snapshot reaper runs"],
  SPACE_SNAPSHOT_REAPER_GRACE_S: [int(0, 31_536_000), "1800", "a local snapshot copy younger than this is never reaped"],
  SPACE_SNAPSHOT_REAPER_IDLE_S: [int(0, 31_536_000), "86400", "a durable local snapshot copy unused this long is freed whatever the cache usage"],
  SPACE_SNAPSHOT_RETENTION_INTERVAL_S: [int(1, 86_400), "300", "how often the controller leader sweeps expired snapshots (blob parts and node copies)"],
  SPACE_SNAPSHOT_PUBLISH_RETRY_S: [int(1, 86_400), "60", "a paused sandbox's snapshot still local (not in the blob store) this long after its pause is published again by the controller leader, which checks at this interval (a publication lost with a restarted control plane, or one that failed)"],
  SPACE_SNAPSHOT_RETENTION_MIN_AGE_S: [int(0, 31_536_000), "1800", "a deleted, failed or superseded snapshot is kept this long before the retention sweeper deletes it"],
} as const satisfies Record<string, readonly [z.ZodType<unknown, string>, string, string]>;

type Vars = typeof vars;
export type Config = { [K in keyof Vars]: z.output<Vars[K][0]> };
export type VarName = keyof Vars;

/**
 * Variables of the project's own scripts (set-up, tests, benches), not of any process:
 * `npm start` runs set-up and `space up` in one environment, so they must not be refused.
 */
const toolingVariable = /^SPACE_(SETUP|TEST|BENCH|K8S|E2E)_[A-Z0-9_]+$|^SPACE_(NO_CACHE|MACHINE_CACHE|ETCD_UNSAFE_NO_FSYNC)$/;

/** Parses every SPACE_* variable; unknown SPACE_* variables are refused too (a typo loses nothing silently). */
export function loadConfig(env: Record<string, string | undefined>, overrides: Partial<Record<VarName, string>> = {}): Config {
  const problems: string[] = [];
  for (const key of Object.keys(env)) {
    if (key.startsWith("SPACE_") && !(key in vars) && !toolingVariable.test(key)) problems.push(`${key} is not a SPACE variable (known: see \`space config\`)`);
  }
  const out: Record<string, unknown> = {};
  for (const [name, [schema, dflt]] of Object.entries(vars)) {
    const raw = overrides[name as VarName] ?? env[name] ?? dflt;
    const r = (schema as z.ZodType).safeParse(raw);
    if (r.success) out[name] = r.data;
    else problems.push(`${name}=${JSON.stringify(raw)} is invalid: expected ${r.error.issues[0]?.message ?? "a valid value"}`);
  }
  if (problems.length) throw new ConfigError(problems.join("\n"));
  const c = out as Config;
  return {
    ...c,
    SPACE_NODE_DIR: c.SPACE_NODE_DIR || join(c.SPACE_DATA_DIR, "node"),
  };
}

/** `space config`: every variable, its default and what it is. */
export function describeConfig(): string {
  return Object.entries(vars)
    .map(([name, [, dflt, what]]) => `${name}=${dflt}\n    ${what}`)
    .join("\n");
}

/** One variable as `space config` shows it: the value in effect and where it came from. */
export interface ConfigEntry {
  name: VarName;
  value: string;
  default: string;
  source: "default" | "env" | "flag";
  description: string;
}

/** Every variable's raw value in effect (override, then env, then default), unparsed. */
export function configEntries(env: Record<string, string | undefined>, overrides: Partial<Record<VarName, string>> = {}): ConfigEntry[] {
  return Object.entries(vars).map(([name, [, dflt, what]]) => {
    const flag = overrides[name as VarName];
    const fromEnv = env[name];
    const source = flag !== undefined ? "flag" : fromEnv !== undefined ? "env" : "default";
    return { name: name as VarName, value: flag ?? fromEnv ?? dflt, default: dflt, source, description: what };
  });
}
