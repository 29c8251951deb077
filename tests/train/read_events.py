#!/usr/bin/python3
"""Independent reader for TensorBoard event files (TFRecord + Event protobuf), used to check
bertcc's writer: verifies both masked CRC32Cs of every record and decodes scalar summaries.
Usage: read_events.py EVENTFILE -> prints tag step value lines; exits 1 on any corruption."""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wire)
        yield f, wire, v


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def main():
    data = open(sys.argv[1], "rb").read()
    i, first = 0, True
    while i < len(data):
        header = data[i:i + 8]
        (n,) = struct.unpack("<Q", header)
        (hc,) = struct.unpack("<I", data[i + 8:i + 12])
        payload = data[i + 12:i + 12 + n]
        (pc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if hc != masked(header) or pc != masked(payload) or len(payload) != n:
            print("CORRUPT record at byte", i)
            return 1
        i += 16 + n
        step, tags = 0, []
        for f, w, v in fields(payload):
            if f == 3 and first:
                assert v == b"brain.Event:2", v
            if f == 2:
                step = v
            if f == 5:
                for f2, _, val in fields(v):
                    tag, simple = None, None
                    for f3, _, x in fields(val):
                        if f3 == 1:
                            tag = x.decode()
                        if f3 == 2:
                            (simple,) = struct.unpack("<f", x)
                    tags.append((tag, simple))
        first = False
        for tag, simple in tags:
            print(tag, step, simple)
    return 0


if __name__ == "__main__":
    sys.exit(main())
