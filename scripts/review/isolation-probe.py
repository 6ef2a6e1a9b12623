# Isolation probes run inside a sandbox by scripts/review/isolation.ts. argv[1]: JSON
# {"tcp": [[host, port], ...]}. Prints one JSON object: probe name -> "refused" or
# "open: <what happened>". A probe is refused when the kernel, the seccomp profile, the
# capability set or the node's firewall says no (an error, a timeout, EPERM, EACCES).
import ctypes, errno, json, os, socket, sys

cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
res = {}

def probe(name, fn):
    try:
        r = fn()
        res[name] = "open: " + str(r)[:120]
    except Exception as e:  # refused: whatever stopped it
        res[name] = "refused"

def sysc(name, *args):
    def run():
        r = getattr(libc, name)(*args)
        if r == -1:
            raise OSError(ctypes.get_errno(), name)
        return f"{name} returned {r}"
    return run

def tcp(host, port):
    def run():
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect((host, port))
        s.close()
        return f"connected to {host}:{port}"
    return run

def read(path, n=16):
    def run():
        with open(path, "rb") as f:
            return f"read {len(f.read(n))} bytes of {path}"
    return run

def write(path, data=b"1"):
    def run():
        with open(path, "wb") as f:
            f.write(data)
        return f"wrote {path}"
    return run

for host, port in cfg["tcp"]:
    probe(f"tcp {host}:{port}", tcp(host, port))
# Raw sockets (no CAP_NET_RAW): spoofing, sniffing.
probe("raw socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) and "raw socket opened")
probe("packet socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW) and "packet socket opened")
# Mounts and namespaces.
probe("mount tmpfs", sysc("mount", b"x", b"/mnt", b"tmpfs", 0, None))
probe("mount proc", sysc("mount", b"proc", b"/mnt", b"proc", 0, None))
probe("remount / rw bind", sysc("mount", b"/", b"/", None, 4096 | 32, None))
probe("unshare user+mount", sysc("unshare", 0x10000000 | 0x00020000))
probe("unshare net", sysc("unshare", 0x40000000))
probe("setns host net", lambda: os.setns(os.open("/proc/1/ns/net", os.O_RDONLY), 0) or "setns ok")
probe("pivot_root", sysc("syscall", 155, b"/tmp", b"/tmp"))
# /proc and /sys.
probe("read /proc/kcore", read("/proc/kcore"))
probe("read /proc/1/mem", read("/proc/1/mem"))
probe("read /proc/1/environ", read("/proc/1/environ"))
probe("write /proc/sysrq-trigger", write("/proc/sysrq-trigger", b"h"))
probe("write /proc/sys/kernel/hostname", write("/proc/sys/kernel/hostname", b"pwn"))
probe("write /proc/sys/net/ipv4/ip_forward", write("/proc/sys/net/ipv4/ip_forward"))
probe("write /sys/kernel/uevent_helper", write("/sys/kernel/uevent_helper", b"/tmp/x"))
probe("write /proc/sys/vm/drop_caches", write("/proc/sys/vm/drop_caches", b"3"))
# Devices.
probe("mknod block device", lambda: os.mknod("/tmp/sda", 0o600 | 0o060000, os.makedev(8, 0)) or "mknod ok")
probe("open /dev/mem", read("/dev/mem"))
probe("open /dev/kmsg", read("/dev/kmsg"))
probe("open /dev/sda", read("/dev/sda"))
probe("open /dev/vda", read("/dev/vda"))
probe("open /dev/loop0", read("/dev/loop0"))
probe("open /dev/fuse", read("/dev/fuse"))
# Capabilities and kernel interfaces.
probe("sethostname", sysc("sethostname", b"pwn", 3))
probe("settimeofday", sysc("settimeofday", ctypes.byref((ctypes.c_long * 2)(0, 0)), None))
probe("init_module", sysc("syscall", 175, None, 0, b""))
probe("bpf", sysc("syscall", 321, 0, None, 0))
probe("perf_event_open", sysc("syscall", 298, ctypes.byref((ctypes.c_uint32 * 32)()), 0, -1, -1, 0))
probe("keyctl", sysc("syscall", 250, 0, -3, 0, 0, 0))
probe("swapoff", sysc("swapoff", b"/dev/sda"))
probe("acct", sysc("acct", b"/tmp/acct"))
probe("kexec_load", sysc("syscall", 246, 0, 0, None, 0))
probe("open_by_handle_at", sysc("syscall", 304, -100, ctypes.byref((ctypes.c_char * 16)()), 0))
def refuse():
    raise OSError(errno.EPERM, "refused")

def chroot_escape():
    # In a child: the classic chroot break-out, then look for a path only the host has.
    pid = os.fork()
    if pid == 0:
        try:
            os.makedirs("/tmp/jail", exist_ok=True)
            os.chroot("/tmp/jail")
            for _ in range(64):
                os.chdir("..")
            os.chroot(".")
            os._exit(0 if os.path.exists(cfg["hostPath"]) else 1)
        except Exception:
            os._exit(1)
    return "escaped to the host's root" if os.waitpid(pid, 0)[1] == 0 else refuse()

def ptrace_pid1():
    if libc.ptrace(16, 1, 0, 0) != 0:
        refuse()
    libc.ptrace(17, 1, 0, 0)
    return "attached to PID 1"

def stop_pid1():
    # Signals to a namespace's init from inside it are dropped unless it handles them: SIGSTOP must not stop it.
    os.kill(1, 19)
    import time
    time.sleep(0.3)
    state = open("/proc/1/stat").read().rsplit(")", 1)[1].split()[0]
    os.kill(1, 18)
    return f"PID 1 state {state}" if state == "T" else refuse()

def link_add():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    # RTM_NEWLINK for a dummy link: the kernel answers EPERM without CAP_NET_ADMIN.
    import struct
    name = b"review0\0"
    kind = b"dummy\0"
    ifla_ifname = struct.pack("HH", 4 + len(name), 3) + name + b"\0" * ((4 - len(name) % 4) % 4)
    info_kind = struct.pack("HH", 4 + len(kind), 1) + kind + b"\0" * ((4 - len(kind) % 4) % 4)
    linkinfo = struct.pack("HH", 4 + len(info_kind), 18) + info_kind
    body = struct.pack("BxHiII", 0, 0, 0, 0, 0) + ifla_ifname + linkinfo
    msg = struct.pack("IHHII", 16 + len(body), 16, 0x1 | 0x4 | 0x400 | 0x200, 1, 0) + body
    s.sendto(msg, (0, 0))
    ack = s.recv(4096)
    err = struct.unpack("i", ack[16:20])[0]
    if err != 0:
        refuse()
    return "added a link"

probe("chroot escape", chroot_escape)
probe("ptrace attach PID 1", ptrace_pid1)
probe("SIGSTOP PID 1", stop_pid1)
probe("netlink link add", link_add)
print(json.dumps(res))
