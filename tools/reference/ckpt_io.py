#!/usr/bin/python3
"""ckpt_io: our own safetensors and GGUF writers and readers in numpy.

Role: tests only. The import tests write tiny random checkpoints with these
writers (Hugging Face layout: safetensors + config.json; llama.cpp layout:
GGUF v3 as its converter writes it, see ../shared/reference/llama-cpp.md),
and the reference (spill_ref_import.py) reads them back with the readers
below and its own dequantisers, never through the C engine or the container.

GGUF layout written: magic, version 3, tensor count, kv count, kvs, tensor
infos (ggml dims = numpy shape reversed), zero padding to general.alignment
(32), then each tensor's data padded to the alignment, offsets relative to
the data start. Quantisers follow ggml's *_ref functions (Q8_0, Q4_0, Q5_0,
Q5_1), written here from their definitions.
"""

import json
import os
import struct

import numpy as np

# ---------------------------------------------------------------- safetensors

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": "bf16", "F8_E4M3": "f8", "U8": np.uint8,
             "F8_E8M0": np.uint8}
# raw byte dtypes read back as uint8 (packed codes, e8m0 scales), not dequantised
ST_RAW = ("U8", "F8_E8M0")


def f32_to_bf16_bits(a):
    """Round-to-nearest-even float32 -> bfloat16 bits (uint16)."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def bf16_bits_to_f32(u):
    return (np.asarray(u, dtype=np.uint32) << 16).view(np.float32)


def fp8_e4m3_to_f32(u):
    u = np.asarray(u, dtype=np.uint8).astype(np.int64)
    s = np.where(u & 0x80, -1.0, 1.0)
    e = (u >> 3) & 0xF
    m = u & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where((u & 0x7F) == 0x7F, np.nan, v)
    return (s * v).astype(np.float32)


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, numpy array); dtype in ST_DTYPES. For
    BF16 the array is float32 (rounded here); for F8_E4M3, U8 and F8_E8M0 it
    is uint8 bits."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs = []
    off = 0
    for name, dt, a in tensors:
        if dt == "BF16":
            raw = f32_to_bf16_bits(a).tobytes()
        elif dt == "F8_E4M3" or dt in ST_RAW:
            raw = np.ascontiguousarray(a, dtype=np.uint8).tobytes()
        else:
            raw = np.ascontiguousarray(a, dtype=ST_DTYPES[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(np.shape(a)), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """-> {name: float32 array} (dequantised; F8 stays as raw values; U8 and
    F8_E8M0 as uint8 bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    if n + 8 > len(data):
        raise ValueError("%s: header length past EOF" % path)
    hdr = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[base + b:base + e]
        shape = tuple(t["shape"])
        dt = t["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype=np.float32)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        elif dt == "BF16":
            a = bf16_bits_to_f32(np.frombuffer(raw, dtype=np.uint16))
        elif dt == "F8_E4M3":
            a = fp8_e4m3_to_f32(np.frombuffer(raw, dtype=np.uint8))
        elif dt in ST_RAW:
            a = np.frombuffer(raw, dtype=np.uint8)
        else:
            raise ValueError("%s: dtype %s" % (name, dt))
        out[name] = a.reshape(shape)
    return out


def read_checkpoint_dir(d):
    """All tensors of a HF checkpoint directory (index or single file)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(d, f)))
    return out

# ---------------------------------------------------------------- GGUF

GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 1, 2, 8, 30
GGML_Q4_K, GGML_Q5_K, GGML_Q6_K = 12, 13, 14
GGML_MXFP4 = 39
GGML_Q5_0, GGML_Q5_1 = 6, 7
GGML_BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q4_0: (32, 18), GGML_Q8_0: (32, 34),
              GGML_BF16: (1, 2), GGML_Q4_K: (256, 144), GGML_Q5_K: (256, 176), GGML_Q6_K: (256, 210),
              GGML_MXFP4: (32, 17), GGML_Q5_0: (32, 22), GGML_Q5_1: (32, 24)}
# ggml's kvalues_mxfp4: the e2m1 values doubled (the e8m0 scale is halved to match)
MXFP4_VALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY, GGUF_U64, GGUF_F64 = 4, 5, 6, 7, 8, 9, 10, 12


def _gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _gval(v):
    """(type, bytes) of a python value; ints are u32 (i32 if negative), floats f32."""
    if isinstance(v, bool):
        return GGUF_BOOL, struct.pack("<B", int(v))
    if isinstance(v, int):
        return (GGUF_I32, struct.pack("<i", v)) if v < 0 else (GGUF_U32, struct.pack("<I", v))
    if isinstance(v, float):
        return GGUF_F32, struct.pack("<f", v)
    if isinstance(v, (str, bytes)):
        return GGUF_STRING, _gstr(v)
    if isinstance(v, np.ndarray) and v.dtype == np.int32:  # an i32 array (token types)
        return GGUF_ARRAY, struct.pack("<IQ", GGUF_I32, v.size) + v.astype("<i4").tobytes()
    if isinstance(v, list):
        if not v:
            return GGUF_ARRAY, struct.pack("<IQ", GGUF_I32, 0)
        t0, _ = _gval(v[0])
        body = b"".join(_gval(x)[1] for x in v)
        return GGUF_ARRAY, struct.pack("<IQ", t0, len(v)) + body
    raise TypeError(type(v))


def quantize_q8_0(x):
    """ggml quantize_row_q8_0_ref on rows (last dim multiple of 32) -> bytes."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = (amax / 127.0).astype(np.float32)
    idv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = x * idv[:, None]
    q = np.where(q >= 0, np.floor(q + 0.5), np.ceil(q - 0.5)).astype(np.int8)  # roundf
    out = np.zeros((x.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def quantize_q4_0(x):
    """ggml quantize_row_q4_0_ref -> bytes."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    i = np.argmax(np.abs(x), axis=1)
    mx = x[np.arange(x.shape[0]), i]
    d = (mx / -8.0).astype(np.float32)
    idv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = np.minimum(15, np.trunc(x * idv[:, None] + np.float32(8.5)).astype(np.int32)).astype(np.uint8)
    out = np.zeros((x.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def _q5_pack(u, d, m=None):
    """block_q5_0 (m None) / block_q5_1 bytes from 5-bit values u (nb, 32)
    and f32 d (and m): f16 d [m], qh (bit j = fifth bit of element j, a
    little-endian word), qs (element j low nibble, j + 16 high)."""
    u = u.astype(np.uint32)
    qh = ((u >> 4) & 1) << np.arange(32, dtype=np.uint32)[None, :]
    qh = np.bitwise_or.reduce(qh, axis=1).astype("<u4")
    head = 2 if m is None else 4
    out = np.zeros((u.shape[0], head + 20), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    if m is not None:
        out[:, 2:4] = m.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, head:head + 4] = qh.view(np.uint8).reshape(-1, 4)
    out[:, head + 4:] = ((u[:, :16] & 0xF) | ((u[:, 16:] & 0xF) << 4)).astype(np.uint8)
    return out.tobytes()


def quantize_q5_0(x):
    """ggml quantize_row_q5_0_ref in f32 (our code): per block of 32, the
    first element of largest |x| gives d = max / -16, id = 1/d (0 if d is
    0); u = min(31, trunc(x id + 16.5)) -> bytes."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    i = np.argmax(np.abs(x), axis=1)
    mx = x[np.arange(x.shape[0]), i]
    d = (mx / np.float32(-16.0)).astype(np.float32)
    idv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), 0).astype(np.float32)
    u = np.minimum(31, np.trunc(x * idv[:, None] + np.float32(16.5)).astype(np.int32))
    return _q5_pack(u, d)


def quantize_q5_1(x):
    """ggml quantize_row_q5_1_ref in f32 (our code): per block of 32, min and
    max, d = (max - min) / 31, id = 1/d (0 if d is 0); u = trunc((x - min)
    id + 0.5); d and m = min stored as f16 -> bytes."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    mn, mx = x.min(axis=1), x.max(axis=1)
    d = ((mx - mn) / np.float32(31.0)).astype(np.float32)
    idv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), 0).astype(np.float32)
    u = np.trunc((x - mn[:, None]) * idv[:, None] + np.float32(0.5)).astype(np.int32)
    return _q5_pack(u, d, mn)


def _f16(b):
    return np.frombuffer(b, dtype=np.float16).astype(np.float32)


def _scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def dequant_ggml(ty, raw, n):
    """Our own dequantisers (ggml's operation order, float32) -> (n,) float32."""
    f32 = np.float32
    if ty == GGML_F32:
        return np.frombuffer(raw, dtype=np.float32)[:n].copy()
    if ty == GGML_F16:
        return np.frombuffer(raw, dtype=np.float16)[:n].astype(np.float32)
    if ty == GGML_BF16:
        return bf16_bits_to_f32(np.frombuffer(raw, dtype=np.uint16)[:n])
    b = np.frombuffer(raw, dtype=np.uint8)
    if ty == GGML_Q8_0:
        b = b.reshape(-1, 34)
        d = _f16(b[:, 0:2].tobytes())
        return (b[:, 2:].view(np.int8).astype(np.float32) * d[:, None]).reshape(-1)
    if ty == GGML_Q4_0:
        b = b.reshape(-1, 18)
        d = _f16(b[:, 0:2].tobytes())
        lo = ((b[:, 2:] & 0xF).astype(np.int32) - 8).astype(np.float32)
        hi = ((b[:, 2:] >> 4).astype(np.int32) - 8).astype(np.float32)
        return (np.concatenate([lo, hi], axis=1) * d[:, None]).reshape(-1)
    if ty in (GGML_Q5_0, GGML_Q5_1):  # ggml's dequantize_row_q5_0 / q5_1
        one = ty == GGML_Q5_1
        b = b.reshape(-1, 24 if one else 22)
        d = _f16(b[:, 0:2].tobytes())[:, None]
        h = 4 if one else 2
        qh = b[:, h:h + 4].copy().view("<u4").astype(np.uint32)  # (nb, 1)
        qs = b[:, h + 4:h + 20].astype(np.uint32)
        u = np.concatenate([qs & 0xF, qs >> 4], axis=1) | (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4)
        if one:
            return ((u.astype(np.float32) * d).astype(np.float32) + _f16(b[:, 2:4].tobytes())[:, None]).reshape(-1)[:n]
        return ((u.astype(np.int32) - 16).astype(np.float32) * d).reshape(-1)[:n]
    if ty == GGML_MXFP4:  # 1 e8m0 byte + 16 code bytes: byte j holds element j (low) and j + 16 (high)
        b = b.reshape(-1, 17)
        e = b[:, 0].astype(np.int32)
        if (e == 255).any():
            raise ValueError("MXFP4 block with e8m0 exponent 255 (NaN)")
        d = np.ldexp(np.float32(1), e - 128).astype(np.float32)  # ggml_e8m0_to_fp32_half: 2^(e-128), e < 2 too
        q = np.concatenate([b[:, 1:] & 0xF, b[:, 1:] >> 4], axis=1)
        return (MXFP4_VALUES[q] * d[:, None]).reshape(-1)[:n]
    f32 = np.float32
    if ty == GGML_Q4_K or ty == GGML_Q5_K:  # vectorised over blocks, ggml's operation order
        bs = 144 if ty == GGML_Q4_K else 176
        b = b.reshape(-1, bs)
        d = _f16(b[:, 0:2].tobytes())[:, None]
        mn = _f16(b[:, 2:4].tobytes())[:, None]
        q = b[:, 4:16].astype(np.int32)
        sc = np.concatenate([q[:, 0:4] & 63, (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)], axis=1)
        mm = np.concatenate([q[:, 4:8] & 63, (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)], axis=1)
        dd = (d * sc.astype(f32)).astype(f32)  # (nb, 8)
        dm = (mn * mm.astype(f32)).astype(f32)
        qh = b[:, 16:48].astype(np.int32) if ty == GGML_Q5_K else None
        ql = (b[:, 48:] if ty == GGML_Q5_K else b[:, 16:]).astype(np.int32)
        out = np.empty((b.shape[0], 256), dtype=f32)
        for j in range(4):
            c = ql[:, 32 * j:32 * j + 32]
            lo, hi = c & 0xF, c >> 4
            if qh is not None:
                lo = lo + np.where(qh & (1 << (2 * j)), 16, 0)
                hi = hi + np.where(qh & (2 << (2 * j)), 16, 0)
            out[:, 64 * j:64 * j + 32] = dd[:, 2 * j:2 * j + 1] * lo.astype(f32) - dm[:, 2 * j:2 * j + 1]
            out[:, 64 * j + 32:64 * j + 64] = dd[:, 2 * j + 1:2 * j + 2] * hi.astype(f32) - dm[:, 2 * j + 1:2 * j + 2]
        return out.reshape(-1)[:n]
    if ty == GGML_Q6_K:
        b = b.reshape(-1, 210)
        d = _f16(b[:, 208:210].tobytes())[:, None]
        sc = b[:, 192:208].view(np.int8).astype(f32)
        out = np.empty((b.shape[0], 256), dtype=f32)
        for h in range(2):
            L = b[:, 64 * h:64 * h + 64].astype(np.int32)
            H = b[:, 128 + 32 * h:128 + 32 * h + 32].astype(np.int32)
            S = sc[:, 8 * h:8 * h + 8]
            q1 = ((L[:, :32] & 0xF) | ((H & 3) << 4)) - 32
            q2 = ((L[:, 32:] & 0xF) | (((H >> 2) & 3) << 4)) - 32
            q3 = ((L[:, :32] >> 4) | (((H >> 4) & 3) << 4)) - 32
            q4 = ((L[:, 32:] >> 4) | (((H >> 6) & 3) << 4)) - 32
            isv = np.arange(32) // 16
            base = 128 * h
            for k, qq in enumerate((q1, q2, q3, q4)):
                s = (d * S[:, isv + 2 * k]).astype(f32)
                out[:, base + 32 * k:base + 32 * k + 32] = s * qq.astype(f32)
        return out.reshape(-1)[:n]
    raise ValueError("ggml type %d" % ty)


def random_kquant(ty, shape, rng, scale=0.02):
    """Random K-quant blocks (random bits, f16 d/dmin set to small positive
    values so no block holds inf/NaN) -> (raw bytes, shape) for write_gguf."""
    be, bb = GGML_BLOCK[ty]
    n = int(np.prod(shape))
    b = rng.integers(0, 256, size=(n // be, bb), dtype=np.uint8)
    d = (rng.uniform(0.2, 1.0, size=n // be) * scale / 256).astype(np.float16).view(np.uint8).reshape(-1, 2)
    m = (rng.uniform(0.2, 1.0, size=n // be) * scale / 256).astype(np.float16).view(np.uint8).reshape(-1, 2)
    if ty == GGML_Q6_K:
        b[:, 208:210] = d
    else:
        b[:, 0:2], b[:, 2:4] = d, m
    return bytes(b.tobytes()), tuple(shape)


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: list of (key, python value) in order; tensors: list of (name,
    ggml_type, numpy array (float32) or (raw bytes, numpy shape))."""
    infos, blobs = [], []
    off = 0
    for name, ty, a in tensors:
        if isinstance(a, tuple):
            raw, shape = a
        else:
            shape = a.shape
            if ty == GGML_F32:
                raw = np.ascontiguousarray(a, dtype=np.float32).tobytes()
            elif ty == GGML_F16:
                raw = np.ascontiguousarray(a, dtype=np.float16).tobytes()
            elif ty == GGML_BF16:
                raw = f32_to_bf16_bits(a).tobytes()
            elif ty == GGML_Q8_0:
                raw = quantize_q8_0(a)
            elif ty == GGML_Q4_0:
                raw = quantize_q4_0(a)
            elif ty == GGML_Q5_0:
                raw = quantize_q5_0(a)
            elif ty == GGML_Q5_1:
                raw = quantize_q5_1(a)
            else:
                raise ValueError("no quantiser for ggml type %d" % ty)
        ne = list(reversed(shape))
        infos.append(_gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
                     + struct.pack("<IQ", ty, off))
        pad = -len(raw) % alignment
        blobs.append(raw + b"\0" * pad)
        off += len(raw) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, v in kvs:
        t, b = _gval(v)
        head += _gstr(k) + struct.pack("<I", t) + b
    head += b"".join(infos)
    head += b"\0" * (-len(head) % alignment)
    with open(path, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)


def read_gguf(path):
    """-> (kv dict, {name: (ggml_type, numpy shape, raw bytes)})."""
    with open(path, "rb") as f:
        data = f.read()
    pos = [0]

    def take(fmt):
        v = struct.unpack_from(fmt, data, pos[0])
        pos[0] += struct.calcsize(fmt)
        return v

    def gstr():
        (n,) = take("<Q")
        if pos[0] + n > len(data):
            raise ValueError("string past EOF")
        s = data[pos[0]:pos[0] + n]
        pos[0] += n
        return s.decode("utf-8", "replace")

    SC = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}

    def val(t):
        if t == GGUF_STRING:
            return gstr()
        if t == GGUF_ARRAY:
            et, n = take("<IQ")
            return [val(et) for _ in range(n)]
        (v,) = take(SC[t])
        return bool(v) if t == GGUF_BOOL else v

    magic, ver, nt, nkv = take("<4sIQQ")
    if magic != b"GGUF" or ver not in (2, 3):
        raise ValueError("not GGUF v2/v3")
    kv = {}
    for _ in range(nkv):
        k = gstr()
        (t,) = take("<I")
        kv[k] = val(t)
    infos = []
    for _ in range(nt):
        name = gstr()
        (nd,) = take("<I")
        ne = take("<%dQ" % nd)
        ty, off = take("<IQ")
        infos.append((name, ne, ty, off))
    al = kv.get("general.alignment", 32)
    ds = (pos[0] + al - 1) // al * al
    out = {}
    for name, ne, ty, off in infos:
        n = int(np.prod(ne))
        be, bb = GGML_BLOCK[ty]
        nb = n // be * bb
        out[name] = (ty, tuple(reversed(ne)), data[ds + off:ds + off + nb])
    return kv, out


def gguf_tensor_f32(t):
    ty, shape, raw = t
    n = int(np.prod(shape))
    return dequant_ggml(ty, raw, n).reshape(shape)
