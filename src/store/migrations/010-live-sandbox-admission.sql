-- Tenant quota admission in one round trip (store/tenant-quotas.ts `admitLiveSandbox`):
-- lock the tenant's row, then sum its live sandboxes. Each statement of a VOLATILE
-- function takes a fresh snapshot, so the sum runs after the lock and sees what a
-- concurrent admission committed while this one waited: two replicas racing for a
-- tenant's last slot never both win, as with the two statements this replaces. The lock
-- is held until the calling transaction ends (call it inside the statement or
-- transaction that makes the sandbox live). Refusal: SQLSTATE SPQ01 with the limit and
-- numbers as JSON in DETAIL. Exempt (`p_exempt`, the warm-pool tenant) or unknown
-- tenants pass (the insert's foreign key refuses an unknown one).
CREATE FUNCTION space_admit_live_sandbox(
  p_tenant text, p_states text[], p_exempt text, p_self text,
  d_sandboxes bigint, d_vcpu bigint, d_memory_mib bigint, d_disk_mib bigint,
  c_vcpu bigint, c_memory_mib bigint, c_disk_mib bigint
) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  lim record;
  used record;
  refused text;
BEGIN
  SELECT t.name, coalesce(q.sandboxes, d_sandboxes) AS sandboxes, coalesce(q.vcpu, d_vcpu) AS vcpu,
         coalesce(q.memory_mib, d_memory_mib) AS memory_mib, coalesce(q.disk_mib, d_disk_mib) AS disk_mib
    INTO lim
    FROM tenants t LEFT JOIN tenant_quotas q ON q.tenant_id = t.id
   WHERE t.id = p_tenant
     FOR NO KEY UPDATE OF t;
  IF NOT FOUND OR lim.name = p_exempt THEN
    RETURN;
  END IF;
  SELECT count(*)::bigint AS sandboxes, coalesce(sum(vcpu), 0)::bigint AS vcpu,
         coalesce(sum(memory_mib), 0)::bigint AS memory_mib, coalesce(sum(disk_mib), 0)::bigint AS disk_mib
    INTO used
    FROM sandboxes
   WHERE tenant_id = p_tenant AND state = ANY (p_states) AND (p_self IS NULL OR id <> p_self);
  refused := CASE
    WHEN used.sandboxes + 1 > lim.sandboxes THEN json_build_object('limit', 'sandboxes', 'used', used.sandboxes, 'requested', 1, 'max', lim.sandboxes)::text
    WHEN used.vcpu + c_vcpu > lim.vcpu THEN json_build_object('limit', 'vcpu', 'used', used.vcpu, 'requested', c_vcpu, 'max', lim.vcpu)::text
    WHEN used.memory_mib + c_memory_mib > lim.memory_mib THEN json_build_object('limit', 'memory_mib', 'used', used.memory_mib, 'requested', c_memory_mib, 'max', lim.memory_mib)::text
    WHEN used.disk_mib + c_disk_mib > lim.disk_mib THEN json_build_object('limit', 'disk_mib', 'used', used.disk_mib, 'requested', c_disk_mib, 'max', lim.disk_mib)::text
  END;
  IF refused IS NOT NULL THEN
    RAISE EXCEPTION 'tenant quota exceeded' USING ERRCODE = 'SPQ01', DETAIL = refused;
  END IF;
END;
$$;
