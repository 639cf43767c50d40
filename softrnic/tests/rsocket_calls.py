"""rsocket calls a program makes, with the results and errnos rdma-core's librdmacm gives,
through softrnic's librdmacm (run under `softrnic exec`). Usage: rsocket_calls.py ADDR PORT.
Prints "ok" at the end; any difference fails an assertion."""

import ctypes
import ctypes.util
import errno
import socket
import struct
import sys

ADDR, PORT = sys.argv[1], int(sys.argv[2])
lib = ctypes.CDLL("librdmacm.so.1", use_errno=True)
for name in ["rsocket", "rbind", "rlisten", "raccept", "rconnect", "rclose", "rshutdown",
             "rsetsockopt", "rgetsockopt", "rgetsockname", "rgetpeername", "rpoll",
             "riounmap"]:
    getattr(lib, name).restype = ctypes.c_int
for name in ["rsend", "rrecv"]:
    getattr(lib, name).restype = ctypes.c_ssize_t
lib.rfcntl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long]
lib.riomap.restype = ctypes.c_long
lib.riomap.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]

SOL_RDMA, RDMA_SQSIZE = 0x10000, 0
F_GETFL, F_SETFL, O_NONBLOCK = 3, 4, 0o4000
MSG_PEEK = 2
POLLIN, POLLOUT, POLLERR, POLLHUP = 1, 4, 8, 16


def fails(ret, code, what):
    err = ctypes.get_errno()
    assert ret == -1 and err == code, f"{what}: {ret}, errno {errno.errorcode.get(err, err)}"


def sockaddr(addr, port):
    """A sockaddr_in: the family in host order, the port and address in network order."""
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H4s8x", port, socket.inet_aton(addr))


def stream():
    fd = lib.rsocket(socket.AF_INET, socket.SOCK_STREAM, 0)
    assert fd >= 0, f"rsocket: errno {ctypes.get_errno()}"
    return fd


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def poll(fd, events, timeout):
    p = PollFd(fd, events, 0)
    n = lib.rpoll(ctypes.byref(p), 1, timeout)
    return n, p.revents


def int_opt(fd, level, name):
    v, n = ctypes.c_int(), ctypes.c_uint(4)
    assert lib.rgetsockopt(fd, level, name, ctypes.byref(v), ctypes.byref(n)) == 0
    return v.value


# Only stream sockets over IPv4 or IPv6 (datagram rsockets are not provided).
fails(lib.rsocket(socket.AF_INET, socket.SOCK_DGRAM, 0), errno.EOPNOTSUPP, "SOCK_DGRAM")
fails(lib.rsocket(socket.AF_UNIX, socket.SOCK_STREAM, 0), errno.EOPNOTSUPP, "AF_UNIX")
fails(lib.rsend(99999, b"x", 1, 0), errno.EBADF, "rsend on no socket")
assert lib.rclose(99999) == errno.EBADF  # rdma-core returns the errno itself here

# Nobody listens: a blocking connect is refused; for a non-blocking one, rpoll says POLLERR and
# SO_ERROR tells why (once).
addr = sockaddr(ADDR, PORT)
fd = stream()
fails(lib.rconnect(fd, addr, len(addr)), errno.ECONNREFUSED, "blocking connect, no listener")
lib.rclose(fd)
fd = stream()
assert lib.rfcntl(fd, F_SETFL, O_NONBLOCK) == 0 and lib.rfcntl(fd, F_GETFL, 0) == O_NONBLOCK
# In progress, or (when the refusal is back before rconnect returns) refused at once.
assert lib.rconnect(fd, addr, len(addr)) == -1
assert ctypes.get_errno() in (errno.EINPROGRESS, errno.ECONNREFUSED), ctypes.get_errno()
n, revents = poll(fd, POLLOUT, 30000)
assert n == 1 and revents & POLLERR, revents
assert int_opt(fd, socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED
assert int_opt(fd, socket.SOL_SOCKET, socket.SO_ERROR) == 0
lib.rclose(fd)

# A listener accepts in the background: a blocking connect completes before raccept.
lfd = stream()
fails(lib.raccept(lfd, None, None), errno.EBADF, "raccept before rlisten")
one = ctypes.c_int(1)
assert lib.rsetsockopt(lfd, socket.SOL_SOCKET, socket.SO_REUSEADDR, ctypes.byref(one), 4) == 0
assert lib.rbind(lfd, addr, len(addr)) == 0
assert lib.rlisten(lfd, 4) == 0
cfd = stream()
assert lib.rconnect(cfd, addr, len(addr)) == 0, ctypes.get_errno()
n, revents = poll(lfd, POLLIN, 30000)
assert n == 1 and revents & POLLIN, "the accepted connection waits"
peer = ctypes.create_string_buffer(128)
plen = ctypes.c_uint(128)
sfd = lib.raccept(lfd, peer, ctypes.byref(plen))
assert sfd >= 0 and plen.value == 16, (sfd, plen.value)
family, port, ip = struct.unpack("=H", peer.raw[:2])[0], *struct.unpack("!H4s", peer.raw[2:8])
assert family == socket.AF_INET and socket.inet_ntoa(ip) == ADDR and port != PORT
local = ctypes.create_string_buffer(128)
llen = ctypes.c_uint(128)
assert lib.rgetsockname(sfd, local, ctypes.byref(llen)) == 0
assert struct.unpack("!H", local.raw[2:4])[0] == PORT

# Options: the queue sizes are fixed once connected.
assert int_opt(sfd, SOL_RDMA, RDMA_SQSIZE) == 384
size = ctypes.c_int(64)
fails(lib.rsetsockopt(sfd, SOL_RDMA, RDMA_SQSIZE, ctypes.byref(size), 4), errno.EINVAL,
      "SOL_RDMA after connecting")

# Data: a non-blocking receive with nothing waiting, a peek, a read; then end of stream.
assert lib.rfcntl(sfd, F_SETFL, O_NONBLOCK) == 0
buf = ctypes.create_string_buffer(64)
fails(lib.rrecv(sfd, buf, 64, 0), errno.EAGAIN, "rrecv with nothing")
assert lib.rsend(cfd, b"hello", 5, 0) == 5
n, revents = poll(sfd, POLLIN, 30000)
assert n == 1 and revents == POLLIN, revents
assert lib.rrecv(sfd, buf, 64, MSG_PEEK) == 5 and buf.raw[:5] == b"hello"
assert lib.rrecv(sfd, buf, 3, 0) == 3 and buf.raw[:3] == b"hel"
assert lib.rrecv(sfd, buf, 64, 0) == 2 and buf.raw[:2] == b"lo"
assert lib.rshutdown(cfd, socket.SHUT_WR) == 0
n, revents = poll(sfd, POLLIN, 30000)
assert n == 1 and revents & POLLIN, revents
assert lib.rrecv(sfd, buf, 64, 0) == 0, "end of stream"

# riomap takes PROT_WRITE or PROT_NONE; riounmap needs a mapping.
mem = ctypes.create_string_buffer(4096)
fails(lib.riomap(sfd, mem, 4096, 1, 0, -1), errno.EINVAL, "riomap PROT_READ")
fails(lib.riounmap(sfd, mem, 4096), errno.EINVAL, "riounmap without riomap")
assert lib.riomap(sfd, mem, 4096, 0, 0, -1) == ctypes.addressof(mem)
assert lib.riounmap(sfd, mem, 4096) == 0

for s in (cfd, sfd, lfd):
    assert lib.rclose(s) == 0
print("ok")
