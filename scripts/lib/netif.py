#!/usr/bin/env python3
"""The network interface steps k8s-sandbox.sh needs, for machines without iproute2 (the GPU machine has no `ip`),
through the kernel's ioctls (no netlink library needed):
  netif.py ipv4                 the first IPv4 address of an interface that is up, loopback excluded (exit 1: none)
  netif.py add-bridge NAME CIDR a bridge NAME with address CIDR (e.g. 10.87.0.1/24), up
  netif.py delete-bridge NAME   the bridge NAME down and removed (exit 0 also when there is none)
"""
import array
import errno
import fcntl
import ipaddress
import socket
import struct
import sys

SIOCGIFCONF = 0x8912
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCSIFADDR = 0x8916
SIOCSIFNETMASK = 0x891C
SIOCBRADDBR = 0x89A0
SIOCBRDELBR = 0x89A1
IFF_UP = 0x1
IFREQ_SIZE = 40  # struct ifreq on 64-bit Linux: 16 bytes of name, a 24-byte union


def ifreq(name, payload=b""):
    return struct.pack("16s", name.encode()) + payload.ljust(IFREQ_SIZE - 16, b"\0")


def sockaddr_in(address):
    return struct.pack("=H2s4s", socket.AF_INET, b"\0\0", socket.inet_aton(address))


def ipv4_addresses(sock):
    """(name, address) of every interface that is up and has an IPv4 address (SIOCGIFCONF lists only those)."""
    arr = array.array("B", bytes(IFREQ_SIZE * 256))
    conf = fcntl.ioctl(sock, SIOCGIFCONF, struct.pack("iL", len(arr), arr.buffer_info()[0]))
    size = struct.unpack("iL", conf)[0]
    data = arr.tobytes()[:size]
    for i in range(0, size, IFREQ_SIZE):
        name = data[i:i + 16].split(b"\0", 1)[0].decode()
        yield name, socket.inet_ntoa(data[i + 20:i + 24])


def set_flags(sock, name, up):
    flags = struct.unpack("16sh", fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq(name))[:18])[1]
    flags = flags | IFF_UP if up else flags & ~IFF_UP
    fcntl.ioctl(sock, SIOCSIFFLAGS, ifreq(name, struct.pack("h", flags)))


def main(argv):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if argv[1:2] == ["ipv4"] and len(argv) == 2:
        for _, address in ipv4_addresses(sock):
            if not ipaddress.ip_address(address).is_loopback:
                print(address)
                return 0
        return 1
    if argv[1:2] == ["add-bridge"] and len(argv) == 4:
        name, network = argv[2], ipaddress.ip_interface(argv[3])
        fcntl.ioctl(sock, SIOCBRADDBR, name.encode() + b"\0")
        fcntl.ioctl(sock, SIOCSIFADDR, ifreq(name, sockaddr_in(str(network.ip))))
        fcntl.ioctl(sock, SIOCSIFNETMASK, ifreq(name, sockaddr_in(str(network.netmask))))
        set_flags(sock, name, True)
        return 0
    if argv[1:2] == ["delete-bridge"] and len(argv) == 3:
        try:
            set_flags(sock, argv[2], False)
        except OSError as e:
            if e.errno == errno.ENODEV:
                return 0
            raise
        fcntl.ioctl(sock, SIOCBRDELBR, argv[2].encode() + b"\0")
        return 0
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except OSError as e:
        print(f"netif.py {' '.join(sys.argv[1:])}: {e.strerror} (errno {e.errno})", file=sys.stderr)
        sys.exit(1)
