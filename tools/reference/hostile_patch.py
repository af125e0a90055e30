#!/usr/bin/python3
"""hostile_patch: in-place edits of tiny test checkpoints, for the hostile
import tests (import_hostile_test.sh). Tests only; every edit keeps the file's
size, so a patched source looks like a same-size rewrite.

  hostile_patch.py st FILE TENSOR BYTE_OFFSET HEX     bytes HEX at BYTE_OFFSET of a
                                                     safetensors tensor's data
  hostile_patch.py gguf FILE TENSOR BYTE_OFFSET HEX   the same in a GGUF tensor's data
  hostile_patch.py gguf-u32 FILE KEY VALUE           a u32/i32 GGUF metadata value
  hostile_patch.py gguf-str FILE KEY TEXT            a GGUF string value (same length)
  hostile_patch.py st-pad FILE BYTES                 a safetensors header grown by an
                                                     __metadata__ string of BYTES (size changes)
  hostile_patch.py sample FILE                       the crc32 of the regions `spill import`'s
                                                     journal identity samples (import_run.c)
"""

import json
import os
import struct
import sys
import zlib

import ckpt_io


def st_offset(path, tensor):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    return 8 + n + hdr[tensor]["data_offsets"][0], hdr[tensor]["data_offsets"][1] - hdr[tensor]["data_offsets"][0]


def gguf_offset(path, tensor):
    _, tensors = ckpt_io.read_gguf(path)
    raw = tensors[tensor][2]
    data = open(path, "rb").read()
    off = data.find(raw)
    if off < 0 or data.find(raw, off + 1) >= 0:
        raise SystemExit("hostile_patch: %s: data not unique in %s" % (tensor, path))
    return off, len(raw)


def put(path, off, blob):
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(blob)


def gguf_key(path, key):
    """Offset of the value (after the u32 type) of metadata KEY."""
    data = open(path, "rb").read()
    k = key.encode()
    at = data.find(struct.pack("<Q", len(k)) + k)
    if at < 0:
        raise SystemExit("hostile_patch: no key %s in %s" % (key, path))
    return at + 8 + len(k) + 4


def main(a):
    if a[0] in ("st", "gguf"):
        base, n = (st_offset if a[0] == "st" else gguf_offset)(a[1], a[2])
        blob = bytes.fromhex(a[4])
        off = int(a[3])
        if off < 0 or off + len(blob) > n:
            raise SystemExit("hostile_patch: offset %d past the tensor's %d bytes" % (off, n))
        put(a[1], base + off, blob)
    elif a[0] == "gguf-u32":
        put(a[1], gguf_key(a[1], a[2]), struct.pack("<I", int(a[3])))
    elif a[0] == "gguf-str":
        at = gguf_key(a[1], a[2])
        data = open(a[1], "rb").read()
        (n,) = struct.unpack_from("<Q", data, at)
        t = a[3].encode()
        if len(t) != n:
            raise SystemExit("hostile_patch: %s is %d bytes, not %d" % (a[2], n, len(t)))
        put(a[1], at + 8, t)
    elif a[0] == "st-pad":
        data = open(a[1], "rb").read()
        (n,) = struct.unpack_from("<Q", data, 0)
        hdr = json.loads(data[8:8 + n])
        hdr["__metadata__"] = {"pad": "x" * int(a[2])}
        h = json.dumps(hdr, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        open(a[1], "wb").write(struct.pack("<Q", len(h)) + h + data[8 + n:])
    elif a[0] == "sample":
        # import_run.c file_sample(): the whole file up to 4 MiB, else the first
        # MiB, 32 chunks of 64 KiB at head + span / 32 * k, and the last 64 KiB
        data = open(a[1], "rb").read()
        whole, head, chunk, nchunks = 4 << 20, 1 << 20, 64 << 10, 32
        if len(data) <= whole:
            crc = zlib.crc32(data)
        else:
            crc = zlib.crc32(data[:head])
            span = len(data) - head - chunk
            for k in range(nchunks):
                o = head + span // nchunks * k
                crc = zlib.crc32(data[o:o + chunk], crc)
            crc = zlib.crc32(data[len(data) - chunk:], crc)
        print("%08x" % crc)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
