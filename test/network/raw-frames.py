# Sends raw Ethernet frames a guest with CAP_NET_RAW could send (run inside a slot netns):
#   python3 raw-frames.py <ifname> <dst mac>
# an 802.1Q-tagged IPv4/UDP frame, an 802.1ad (QinQ) frame and a frame of an unknown ethertype.
import socket, struct, sys

ifname, dst = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
src = s.getsockname()[4]
ip = bytes.fromhex("450000200000400040110000") + socket.inet_aton("10.0.0.2") + socket.inet_aton("10.0.0.1")
udp = struct.pack("!HHHH", 1234, 9999, 12, 0) + b"ping"
for outer in (0x8100, 0x88A8):
    s.send(dst + src + struct.pack("!HHH", outer, 77, 0x0800) + ip + udp)
s.send(dst + src + struct.pack("!H", 0x88B5) + b"\x00" * 46)
print("sent 3")
