#!/usr/bin/env python3
"""Writes the seed corpus of the `endpoint` target into
crates/mptun-fuzz/corpus/endpoint/ (checked in; `cargo test -p mptun-fuzz`
replays it): a clean run in each mode, then, for one frame of every kind of
MPTCP option in the kernel capture, inputs that inject that frame (rewritten
onto a live subflow by the harness) after 1, 3 and 6 rounds of delivery.

The input format is the harness's (crates/mptun-fuzz/src/{world,input}.rs):
three setup bytes, then steps of an opcode byte and its operands.
Usage: python3 seed_endpoint.py [path/to/capture.pcap]
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PCAP = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../crates/mptun-wire/tests/data/kernel-mptcp-2paths.pcap")
OUT = os.path.join(HERE, "../crates/mptun-fuzz/corpus/endpoint")
LINK_HDR = {1: 14, 101: 0, 113: 16, 276: 20}

DELIVER_ALL = bytes([3])
NEXT_TIMER = bytes([7, 3])
# Setup byte 0: bit 0 plain TCP, 1 DSS checksums, 2 liar, 3 no ADD_ADDR,
# 4 no client subflow endpoint, 5 no timestamps, 6 no SACK.
MODES = {"mptcp": 0x00, "tcp": 0x01, "csum": 0x02, "liar": 0x04, "nojoin": 0x18, "bare": 0x60}
SIZES = 0x44  # 4 KiB + 1 from the client, 2 KiB + 1 from the server


def tcp_frames(path):
    """(index, option kinds) of every IPv4 TCP frame, in the harness's order."""
    raw = open(path, "rb").read()
    endian = "<" if struct.unpack("<I", raw[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    skip = LINK_HDR[struct.unpack(endian + "I", raw[20:24])[0]]
    at, idx = 24, 0
    while at + 16 <= len(raw):
        incl = struct.unpack(endian + "I", raw[at + 8 : at + 12])[0]
        ip = raw[at + 16 + skip : at + 16 + incl]
        at += 16 + incl
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        seg = ip[ihl:]
        hlen = (seg[12] >> 4) * 4
        opts, kinds, i = seg[20:hlen], [], 0
        while i < len(opts):
            k = opts[i]
            if k in (0, 1):
                i += 1
                continue
            if i + 1 >= len(opts) or opts[i + 1] < 2:
                break
            ln = opts[i + 1]
            if k == 30 and i + 2 < len(opts):
                kinds.append((opts[i + 2] >> 4, ln))
            i += ln
        yield idx, seg[13], tuple(kinds)
        idx += 1


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    n = 0
    for mode, a in MODES.items():
        steps = (DELIVER_ALL * 4 + NEXT_TIMER) * 10
        write(f"seed-clean-{mode}", bytes([a, SIZES, 0]) + steps)
        n += 1
    seen = set()
    for idx, flags, kinds in tcp_frames(PCAP):
        key = (flags & 0x17, kinds)
        if key in seen:
            continue
        seen.add(key)
        for rounds in (1, 3, 6):
            # Op 10: kernel frame (u16 index, then odd = the frame's own subflow).
            inject = bytes([10]) + struct.pack(">H", idx) + bytes([1])
            body = DELIVER_ALL * rounds + inject + (DELIVER_ALL * 3 + NEXT_TIMER) * 6
            write(f"seed-kernel-{idx:03d}-after-{rounds}", bytes([0x00, SIZES, 0]) + body)
            n += 1
    print(f"{n} seeds in {OUT}")


if __name__ == "__main__":
    main()
