"""write_container: a minimal Python writer of spill containers (docs/FORMAT.md).

Role: test fixtures only. It lets tools/reference tests (and, if useful, the
engine's agreement tests) build tiny containers by hand without the C writer,
so the reference reader is checked against bytes laid out straight from the
spec. It writes exactly what FORMAT.md prescribes: trunk tensors in array
order at 64-byte aligned offsets, zero padding, bank header pages and records
with their CRC-32s, and manifest.json last. No validation beyond asserts on
the caller's own arguments (the inputs here are trusted test data).

Encoders turn *quantised representations* (integers + scales) into bytes, so
tests choose values that are exactly representable and know the true weights.
"""

import json
import os
import struct
import zlib

import numpy as np

DTYPE_IDS = {"f32": 0, "f16": 1, "bf16": 2, "q8": 3, "q4": 4, "rvq3": 5}
RECORD_MAGIC = 0x52585053


def _round_up(x, a):
    return (x + a - 1) // a * a


# -- encoders: return raw bytes in the FORMAT.md layout ----------------------

def enc_f32(w):
    return np.ascontiguousarray(w, dtype="<f4").tobytes()


def enc_f16(w):
    return np.ascontiguousarray(w, dtype="<f2").tobytes()


def enc_bf16(w):
    """Truncating bf16 encoder: exact for values that are bf16-representable."""
    u = np.ascontiguousarray(w, dtype="<f4").view("<u4")
    return (u >> 16).astype("<u2").tobytes()


def enc_q8(q, scales):
    """q: int (rows, cols) in [-128, 127]; scales: (rows, cols/group)."""
    return np.asarray(q, dtype=np.int8).tobytes() + np.asarray(scales, dtype="<f2").tobytes()


def enc_q4(nib, scales):
    """nib: int (rows, cols) in [0, 15] (weight = s * (nib - 8))."""
    flat = np.asarray(nib, dtype=np.uint8).reshape(-1)
    packed = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)
    return packed.tobytes() + np.asarray(scales, dtype="<f2").tobytes()


def enc_rvq3(idx, scales):
    """idx: (rows, cols/8, 3) uint8 codebook indices; scales: (rows,)."""
    return np.asarray(idx, dtype=np.uint8).tobytes() + np.asarray(scales, dtype="<f2").tobytes()


def dtype_bytes(dtype, rows, cols, group=0):
    n = rows * cols
    return {"f32": 4 * n, "f16": 2 * n, "bf16": 2 * n,
            "q8": n + 2 * rows * (cols // group) if group else None,
            "q4": n // 2 + 2 * rows * (cols // group) if group else None,
            "rvq3": 3 * rows * (cols // 8) + 2 * rows}[dtype]


# -- the writer --------------------------------------------------------------

def write(path, arch, tensors, experts=None, expert_dtype="f32", expert_group=0,
          name="tiny"):
    """Writes a container directory.

    tensors: list of (name, dtype, shape, data_bytes, group) in trunk order.
    experts: {layer: [(gate_bytes, up_bytes, down_bytes) for e in 0..n_experts)}
    for every MoE layer, each in `expert_dtype`. Returns the manifest dict."""
    os.makedirs(path, exist_ok=True)
    trunk = bytearray()
    tlist = []
    for tname, dtype, shape, data, group in tensors:
        rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
        assert len(data) == dtype_bytes(dtype, rows, cols, group), tname
        off = _round_up(len(trunk), 64)
        trunk += bytes(off - len(trunk)) + data
        t = {"name": tname, "dtype": dtype, "shape": list(shape), "offset": off,
             "bytes": len(data), "crc32": zlib.crc32(data)}
        if dtype in ("q8", "q4"):
            t["group"] = group
        tlist.append(t)
    if trunk:
        trunk += bytes(_round_up(len(trunk), 4096) - len(trunk))
    with open(os.path.join(path, "trunk.bin"), "wb") as f:
        f.write(trunk)
    files = [{"name": "trunk.bin", "bytes": len(trunk), "crc32": zlib.crc32(bytes(trunk))}]

    m = {"format": "spill", "version": 1, "name": name,
         "generator": {"tool": "tools/reference/write_container.py"},
         "arch": arch, "tensors": tlist, "banks": [], "files": files}
    n_moe = arch["n_layers"] - arch["n_dense_layers"]
    if n_moe > 0:
        mo = arch["moe"]
        d_in = mo["d_latent"] if mo["d_latent"] > 0 else arch["d_model"]
        dims = [("gate", mo["d_expert"], d_in), ("up", mo["d_expert"], d_in),
                ("down", d_in, mo["d_expert"])]
        sections, off = [], 64
        for sname, rows, cols in dims:
            nb = dtype_bytes(expert_dtype, rows, cols, expert_group)
            sections.append({"name": sname, "rows": rows, "cols": cols, "offset": off,
                             "bytes": nb})
            end = off + nb
            off = _round_up(end, 64)
        payload_bytes = end - 64
        record_bytes = _round_up(end, 4096)
        ex = {"dtype": expert_dtype, "record_bytes": record_bytes,
              "payload_bytes": payload_bytes, "sections": sections}
        if expert_dtype in ("q8", "q4"):
            ex["group"] = expert_group
        m["experts"] = ex
        dt = DTYPE_IDS[expert_dtype]
        for layer in range(arch["n_dense_layers"], arch["n_layers"]):
            fname = f"experts-{layer:03d}.bin"
            page = bytearray(4096)
            page[0:8] = b"SPILLBNK"
            struct.pack_into("<4I2Q", page, 8, 1, layer, mo["n_experts"], dt, record_bytes, 4096)
            struct.pack_into("<I", page, 40, zlib.crc32(bytes(page)))
            blob = bytearray(page)
            recs = experts[layer]
            assert len(recs) == mo["n_experts"]
            for e, mats in enumerate(recs):
                rec = bytearray(record_bytes)
                for s, data in zip(sections, mats):
                    assert len(data) == s["bytes"], (layer, e, s["name"])
                    rec[s["offset"]:s["offset"] + s["bytes"]] = data
                pcrc = zlib.crc32(bytes(rec[64:64 + payload_bytes]))
                struct.pack_into("<IHHIIIIII3II", rec, 0, RECORD_MAGIC, 1, dt, layer, e, 64,
                                 payload_bytes, pcrc, 0, sections[0]["offset"],
                                 sections[1]["offset"], sections[2]["offset"], 3)
                struct.pack_into("<I", rec, 28, zlib.crc32(bytes(rec[:64])))
                blob += rec
            with open(os.path.join(path, fname), "wb") as f:
                f.write(blob)
            m["banks"].append({"layer": layer, "file": fname, "n_experts": mo["n_experts"],
                               "record_bytes": record_bytes, "data_offset": 4096})
            files.append({"name": fname, "bytes": len(blob), "crc32": zlib.crc32(bytes(blob))})
    tmp = os.path.join(path, "manifest.json.tmp")
    with open(tmp, "w") as f:
        json.dump(m, f, indent=1)
    os.replace(tmp, os.path.join(path, "manifest.json"))
    return m
