#!/usr/bin/env python3
"""Writes one seed per frame of the kernel capture into corpus/parse_packet/.

The capture was taken before checksum offload (the TCP checksum field holds
only the pseudo-header sum), so the full checksum is filled in here for
frames captured whole: the seeds then pass verification and the fuzzer
starts past the checksum gate. Cut frames are kept too (they exercise the
truncation paths). Usage: python3 seed_from_pcap.py [path/to/capture.pcap]
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PCAP = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../crates/mptun-wire/tests/data/kernel-mptcp-2paths.pcap")
OUT = os.path.join(HERE, "corpus", "parse_packet")
LINK_HDR = {1: 14, 101: 0, 113: 16, 276: 20}


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def main() -> None:
    raw = open(PCAP, "rb").read()
    magic = struct.unpack("<I", raw[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    link = struct.unpack(endian + "I", raw[20:24])[0]
    skip = LINK_HDR[link]
    os.makedirs(OUT, exist_ok=True)
    at, n = 24, 0
    while at + 16 <= len(raw):
        incl, orig = struct.unpack(endian + "II", raw[at + 8 : at + 16])
        ip = bytearray(raw[at + 16 + skip : at + 16 + incl])
        at += 16 + incl
        n += 1
        if incl == orig and ip and ip[0] >> 4 == 4:
            ihl = (ip[0] & 15) * 4
            seg = ip[ihl:]
            pseudo = ip[12:20] + struct.pack("!BBH", 0, 6, len(seg))
            seg[16:18] = b"\0\0"
            c = 0xFFFF ^ csum(bytes(pseudo) + bytes(seg))
            ip[ihl + 16 : ihl + 18] = struct.pack("!H", c)
        with open(os.path.join(OUT, f"frame-{n:03d}"), "wb") as f:
            f.write(ip)
    print(f"{n} seeds in {OUT}")


if __name__ == "__main__":
    main()
