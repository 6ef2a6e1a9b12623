/**
 * Default seccomp profile: allow by default, deny the syscalls a sandbox never needs and
 * that widen the kernel attack surface or escape the sandbox. Capabilities already
 * refuse most of these; seccomp is the second wall (e.g. against a capability a future
 * change adds back). A denylist, not an allowlist, so arbitrary user software (compilers,
 * language runtimes, databases) keeps working.
 */
const EPERM = 1;
const ENOSPC = 28;
const ENOSYS = 38;

/** Syscalls refused with EPERM. */
export const deniedSyscalls = [
  // mounts and root switching
  "mount", "umount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "move_mount", "open_tree", "fspick", "mount_setattr",
  // kernel modules and kernel replacement
  "init_module", "finit_module", "delete_module", "create_module", "kexec_load", "kexec_file_load", "reboot",
  // tracing / introspection of the kernel
  "bpf", "perf_event_open", "lookup_dcookie", "kcmp",
  // namespaces (escape via user namespaces)
  "unshare", "setns",
  // host-wide state
  "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime", "syslog",
  "sethostname", "setdomainname", "iopl", "ioperm", "quotactl", "quotactl_fd", "nfsservctl", "vhangup",
  // file handles bypass path permissions (shocker)
  "open_by_handle_at", "name_to_handle_at",
  // kernel keyrings are not namespaced
  "add_key", "request_key", "keyctl",
  // obsolete / rarely needed, large attack surface
  "uselib", "ustat", "sysfs", "_sysctl", "vm86", "vm86old", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
] as const;

const CLONE_NEWUSER = 0x10000000;

export function defaultSeccompProfile(arch: string = process.arch): Record<string, unknown> {
  return {
    defaultAction: "SCMP_ACT_ALLOW",
    architectures: arch === "arm64" ? ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"] : ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    syscalls: [
      { names: [...deniedSyscalls], action: "SCMP_ACT_ERRNO", errnoRet: EPERM },
      // clone creating a user namespace is refused (the first step of most container escapes);
      // other namespace flags already fail without CAP_SYS_ADMIN.
      {
        names: ["clone"],
        action: "SCMP_ACT_ERRNO",
        errnoRet: EPERM,
        args: [{ index: 0, value: CLONE_NEWUSER, valueTwo: CLONE_NEWUSER, op: "SCMP_CMP_MASKED_EQ" }],
      },
      // clone3 passes flags in a struct seccomp cannot read: ENOSYS makes libc fall back to clone.
      { names: ["clone3"], action: "SCMP_ACT_ERRNO", errnoRet: ENOSYS },
      // No memory protection keys (PKU): a memory checkpoint (CRIU) does not restore the
      // kernel's record of allocated keys, so a process restored holding one fails its next
      // pkey_mprotect with EINVAL. V8 (envd, any Node.js) protects wasm code with a key and
      // aborts then ("Commit wasm code space Allocation failed") at its first wasm compile
      // after a pause. ENOSPC is what a CPU without PKU answers; V8 goes on without a key.
      { names: ["pkey_alloc"], action: "SCMP_ACT_ERRNO", errnoRet: ENOSPC },
    ],
  };
}
