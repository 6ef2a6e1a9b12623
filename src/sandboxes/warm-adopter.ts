/**
 * The seam between creates and warm pools (src/controller/warm-pools/adoption.ts): the
 * service asks a `WarmAdopter` for a ready member before it boots one, and the adopter
 * works on members through `WarmMembers` (the part of the service it needs), so neither
 * imports the other. The adopter is built over the service's members when the service
 * is constructed (`SandboxServiceDeps.warmPools`).
 */
import type { SandboxId, TenantId } from "../core/ids.ts";
import type { Substrate } from "../substrate/substrate.ts";
import type { CreateInput, PlacementInput } from "./create-input.ts";
import type { ConnectResult } from "./lifecycle.ts";
import type { TemplateMatch, SandboxRecord, SandboxRepo } from "./model.ts";

/** What a create asks a warm pool for (resolved and validated by the service). */
export interface AdoptRequest {
  template: TemplateMatch;
  vcpu: number;
  memoryMib: number;
  diskMib: number;
  placement: PlacementInput;
  input: CreateInput;
}

/** Warm-pool adoption; null = no member, create cold. */
export interface WarmAdopter {
  /** Whether any pool may have a member to offer (a cheap hint; false = create cold without asking). */
  hasPools(): Promise<boolean>;
  adopt(tenantId: TenantId, req: AdoptRequest, signal: AbortSignal): Promise<SandboxRecord | null>;
  /** Claims a ready member for a create that runs later (Native admission); its id, or null. */
  reserve(tenantId: TenantId, req: Omit<AdoptRequest, "input">, signal: AbortSignal): Promise<SandboxId | null>;
  /** Whether `sandboxId` is a member reserved for `tenantId` and not yet adopted. */
  isReserved(sandboxId: SandboxId, tenantId: TenantId): Promise<boolean>;
  /** Hands a reservation back to the pool (the create it was for will not run). */
  release(sandboxId: SandboxId, tenantId: TenantId): Promise<void>;
}

/** What an adopter may do with members: read them, restore a suspended one, kill a bad one, set its egress. */
export interface WarmMembers {
  readonly repo: SandboxRepo;
  readonly substrate: Substrate;
  connect(tenantId: TenantId, id: string, timeoutSec: number | undefined, opts: { pinned: true }): Promise<ConnectResult>;
  kill(tenantId: TenantId, id: string, reason?: string): Promise<void>;
}
