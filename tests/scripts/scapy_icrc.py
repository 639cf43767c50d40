"""Prints, for each frame of a pcap, the ICRC scapy computes and the one the frame carries.

scapy.contrib.roce computes the ICRC for IPv4 (BTH.compute_icrc). It has no IPv6 support, so for
IPv6 this script masks the fields RoCEv2 names (Traffic Class, Flow Label, Hop Limit, UDP
checksum, BTH FECN/BECN/reserved) on scapy's own IPv6/UDP/BTH layers, the same way scapy does for
IPv4, and hashes with zlib.crc32.

Output: one line per frame, "<index> <computed> <carried>" in hex, or "<index> skip <why>".
"""
import struct
import sys
import zlib

from scapy.all import IPv6, UDP, Raw, rdpcap, raw
from scapy.contrib.roce import BTH


def icrc_ipv6(pkt):
    ip = pkt[IPv6].copy()
    ip.tc = 0xFF
    ip.fl = 0xFFFFF
    ip.hlim = 0xFF
    ip[UDP].chksum = 0xFFFF
    ip[BTH].fecn = 1
    ip[BTH].becn = 1
    ip[BTH].resv6 = 0x3F
    bth = ip[BTH].self_build()
    payload = raw(ip[BTH].payload)
    ip[UDP].payload = Raw(bth + payload)
    # raw(ip) now ends before the ICRC: the pseudo LRH, then everything up to the pad.
    return zlib.crc32(b"\xff" * 8 + raw(ip)) & 0xFFFFFFFF


def main(path):
    for i, pkt in enumerate(rdpcap(path)):
        if BTH not in pkt:
            print(i, "skip", "no BTH")
            continue
        carried = struct.unpack("<I", raw(pkt)[-4:])[0]
        if IPv6 in pkt:
            computed = icrc_ipv6(pkt)
        else:
            computed = struct.unpack("<I", pkt[BTH].compute_icrc(None))[0]
        print(i, f"{computed:08x}", f"{carried:08x}")


if __name__ == "__main__":
    main(sys.argv[1])
