# What a guest does, run INSIDE a sandbox (python3 is in `base`): prints one JSON array,
# one result per check of the JSON array in argv[1]. Only the standard library.
#   ["tcp", host, port]               -> "open" | "refused" | "timeout" | error name
#   ["http", host, port, hostHeader]  -> response body | "closed" | "refused" | ...
#   ["tls", host, port, sni]          -> "open <first bytes the server sent>" | "closed" | ...
#   ["udp", host, port]               -> reply | "noreply" | "refused"
#   ["dns", name, server|null, tcp]   -> addresses joined by "," | "rcode N" | error
#                                        (server null = the sandbox's resolv.conf nameserver)
#   ["gateway"]                       -> the nameserver of resolv.conf (the node gateway)
#   ["addr"]                          -> this sandbox's own address
import json, os, random, socket, struct, sys

T = 3


def err(e):
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    if isinstance(e, ConnectionResetError):
        return "reset"
    if isinstance(e, socket.timeout):
        return "timeout"
    return type(e).__name__


def resolv_server():
    for line in open("/etc/resolv.conf"):
        p = line.split()
        if len(p) >= 2 and p[0] == "nameserver":
            return p[1]
    return "127.0.0.1"


def tcp(host, port):
    try:
        socket.create_connection((host, port), T).close()
        return "open"
    except Exception as e:
        return err(e)


def read_all(s):
    out = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            out += b
    except Exception as e:
        if not out:
            return err(e)
    return out


def http(host, port, host_header):
    try:
        s = socket.create_connection((host, port), T)
    except Exception as e:
        return err(e)
    s.settimeout(T)
    try:
        s.sendall(("GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % host_header).encode())
    except Exception as e:
        return err(e)
    r = read_all(s)
    s.close()
    if isinstance(r, str):
        return r
    if not r:
        return "closed"
    return r.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")


def client_hello(sni):
    name = sni.encode()
    sni_ext = struct.pack("!HBH", len(name) + 3, 0, len(name)) + name
    exts = struct.pack("!HH", 0, len(sni_ext)) + sni_ext
    body = b"\x03\x03" + os.urandom(32) + b"\x00" + struct.pack("!H", 2) + b"\x00\x2f" + b"\x01\x00" + struct.pack("!H", len(exts)) + exts
    hs = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs


def tls(host, port, sni):
    try:
        s = socket.create_connection((host, port), T)
    except Exception as e:
        return err(e)
    s.settimeout(T)
    try:
        s.sendall(client_hello(sni))
        b = s.recv(200)
    except Exception as e:
        return err(e)
    finally:
        s.close()
    return "open " + b.decode(errors="replace").strip() if b else "closed"


def udp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(T)
    try:
        s.connect((host, port))
        s.send(b"ping")
        return s.recv(512).decode()
    except socket.timeout:
        return "noreply"
    except Exception as e:
        return err(e)
    finally:
        s.close()


def dns_query(name):
    q = struct.pack("!HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack("!HH", 1, 1)


def skip_name(m, i):
    while True:
        n = m[i]
        if n & 0xC0 == 0xC0:
            return i + 2
        if n == 0:
            return i + 1
        i += n + 1


def dns(name, server, over_tcp):
    server = server or resolv_server()
    q = dns_query(name)
    try:
        if over_tcp:
            s = socket.create_connection((server, 53), T)
            s.settimeout(T)
            s.sendall(struct.pack("!H", len(q)) + q)
            buf = b""
            while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
                b = s.recv(4096)
                if not b:
                    return "closed"
                buf += b
            s.close()
            m = buf[2:]
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(T)
            s.connect((server, 53))
            s.send(q)
            m = s.recv(4096)
            s.close()
    except Exception as e:
        return err(e)
    rcode = m[3] & 15
    if rcode:
        return "rcode %d" % rcode
    an = struct.unpack("!H", m[6:8])[0]
    i = skip_name(m, 12) + 4
    out = []
    for _ in range(an):
        i = skip_name(m, i)
        typ, _cls, _ttl, ln = struct.unpack("!HHIH", m[i:i + 10])
        i += 10
        if typ == 1 and ln == 4:
            out.append(".".join(str(x) for x in m[i:i + 4]))
        i += ln
    return ",".join(out)


def own_addr():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((resolv_server(), 53))
    a = s.getsockname()[0]
    s.close()
    return a


def run(c):
    k = c[0]
    if k == "tcp":
        return tcp(c[1], c[2])
    if k == "http":
        return http(c[1], c[2], c[3])
    if k == "tls":
        return tls(c[1], c[2], c[3])
    if k == "udp":
        return udp(c[1], c[2])
    if k == "dns":
        return dns(c[1], c[2], c[3])
    if k == "gateway":
        return resolv_server()
    if k == "addr":
        return own_addr()
    return "unknown check " + k


print(json.dumps([run(c) for c in json.loads(sys.argv[1])]))
