#!/usr/bin/python3
"""spill_ref: an independent numpy reference of the spill forward pass.

Role: tests only. It reads a spill container (docs/FORMAT.md) with its own
parser and dequantisers and runs the forward pass of docs/MODEL.md in float64,
one token at a time, so the C engine (engine/model) can be checked against a
second implementation written from the same equations. It is never on the
inference path and favours clarity over speed (like zstd's educational
decoder): every function follows one equation of MODEL.md.

Invariants: nothing here reads or imports the C engine; every byte read from
the container is checked for size before it is interpreted; weights are
dequantised to float64 exactly (f16/bf16/q8/q4/rvq3 values are all exactly
representable), so the only rounding is float64 arithmetic.

Use as a module:   logits = forward_all("path/to/container", tokens)  # (n, vocab)
Use as a CLI:      /usr/bin/python3 spill_ref.py MODEL --prompt "hi" --all-positions \
                       --logits-out logits.f32
"""

import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np

# ---------------------------------------------------------------------------
# Format constants (docs/FORMAT.md, engine/format/container.h)
# ---------------------------------------------------------------------------

FORMAT_VERSION = 2      # written by spill; 1 is still read (no container id)
FORMAT_VERSIONS = (1, 2, 3)
PAGE = 4096
TENSOR_ALIGN = 64
RECORD_HEADER_BYTES = 64
BANK_HEADER_BYTES = 4096
RECORD_MAGIC = 0x52585053  # "SPXR" little-endian
BANK_MAGIC = b"SPILLBNK"
MANIFEST_MAX_BYTES = 64 << 20

DTYPE_IDS = {"f32": 0, "f16": 1, "bf16": 2, "q8": 3, "q4": 4, "rvq3": 5, "q4_k": 6, "q5_k": 7,
             "q6_k": 8, "q5_0": 10, "q5_1": 11}
Q5_BLOCK = {"q5_0": 22, "q5_1": 24}  # bytes per 32 (ggml block_q5_0 / block_q5_1)
KQUANT_BLOCK = {"q4_k": 144, "q5_k": 176, "q6_k": 210}  # bytes per 256 (ggml super-blocks)
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
RVQ_STAGES, RVQ_ENTRIES, RVQ_DIM = 3, 256, 8
SECTIONS = ("gate", "up", "down")


class FormatError(Exception):
    """The container is malformed (untrusted input): a clear message, never a crash."""


# ---------------------------------------------------------------------------
# Dequantisers: bytes of a (rows, cols) row-major matrix -> float64 (rows, cols)
# ---------------------------------------------------------------------------


def dtype_matrix_bytes(dtype, rows, cols, group=0):
    """Size in bytes of a (rows, cols) matrix of `dtype` (kernels.h layouts)."""
    n = rows * cols
    if dtype == "f32":
        return 4 * n
    if dtype in ("f16", "bf16"):
        return 2 * n
    if dtype in ("q8", "q4"):
        if group <= 0 or cols % group != 0:
            raise FormatError(f"{dtype}: cols {cols} not a multiple of group {group}")
        if dtype == "q4" and group % 2 != 0:
            raise FormatError(f"q4: odd group {group}")
        values = n if dtype == "q8" else n // 2
        return values + 2 * rows * (cols // group)
    if dtype in KQUANT_BLOCK:
        if cols % 256 != 0:
            raise FormatError(f"{dtype}: cols {cols} not a multiple of 256")
        return rows * (cols // 256) * KQUANT_BLOCK[dtype]
    if dtype in Q5_BLOCK:
        if cols % 32 != 0:
            raise FormatError(f"{dtype}: cols {cols} not a multiple of 32")
        return rows * (cols // 32) * Q5_BLOCK[dtype]
    if dtype == "rvq3":
        if cols % RVQ_DIM != 0:
            raise FormatError(f"rvq3: cols {cols} not a multiple of {RVQ_DIM}")
        return RVQ_STAGES * rows * (cols // RVQ_DIM) + 2 * rows
    raise FormatError(f"unknown dtype {dtype!r}")


def _need(buf, nbytes, what):
    if len(buf) < nbytes:
        raise FormatError(f"{what}: need {nbytes} bytes, have {len(buf)}")


def deq_f32(buf, rows, cols):
    _need(buf, 4 * rows * cols, "f32")
    return np.frombuffer(buf, dtype="<f4", count=rows * cols).astype(np.float64).reshape(rows, cols)


def deq_f16(buf, rows, cols):
    _need(buf, 2 * rows * cols, "f16")
    return np.frombuffer(buf, dtype="<f2", count=rows * cols).astype(np.float64).reshape(rows, cols)


def bf16_bits_to_f64(u16):
    """bfloat16 bit patterns (uint16 array) -> float64: the top half of an f32."""
    return (u16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def deq_bf16(buf, rows, cols):
    _need(buf, 2 * rows * cols, "bf16")
    u = np.frombuffer(buf, dtype="<u2", count=rows * cols)
    return bf16_bits_to_f64(u).reshape(rows, cols)


def _group_scales(buf, offset, rows, cols, group):
    ng = cols // group
    s = np.frombuffer(buf, dtype="<f2", count=rows * ng, offset=offset).astype(np.float64)
    # scale of element (r, c) is s[r, c // group]
    return np.repeat(s.reshape(rows, ng), group, axis=1)


def deq_q8(buf, rows, cols, group):
    """q8: rows*cols int8 values, then rows*(cols/group) f16 scales; w = s * q."""
    _need(buf, dtype_matrix_bytes("q8", rows, cols, group), "q8")
    q = np.frombuffer(buf, dtype=np.int8, count=rows * cols).astype(np.float64).reshape(rows, cols)
    return q * _group_scales(buf, rows * cols, rows, cols, group)


def deq_q4(buf, rows, cols, group):
    """q4: rows*cols/2 bytes, element 2i in the low nibble of byte i and element
    2i+1 in the high nibble; then rows*(cols/group) f16 scales; w = s*(nib-8)."""
    _need(buf, dtype_matrix_bytes("q4", rows, cols, group), "q4")
    n = rows * cols
    b = np.frombuffer(buf, dtype=np.uint8, count=n // 2)
    nib = np.empty(n, dtype=np.int64)
    nib[0::2] = b & 0x0F
    nib[1::2] = b >> 4
    q = (nib - 8).astype(np.float64).reshape(rows, cols)
    return q * _group_scales(buf, n // 2, rows, cols, group)


def deq_rvq3(buf, rows, cols, codebook):
    """rvq3: rows*(cols/8)*3 uint8 indices ordered (row, group, stage), then
    rows f16 scales; w[r][8g+j] = s[r] * sum_stage cb[stage][i_stage][j].
    codebook: float64 (3, 256, 8) (or (768, 8))."""
    _need(buf, dtype_matrix_bytes("rvq3", rows, cols), "rvq3")
    cb = np.asarray(codebook, dtype=np.float64).reshape(RVQ_STAGES, RVQ_ENTRIES, RVQ_DIM)
    ng = cols // RVQ_DIM
    idx = np.frombuffer(buf, dtype=np.uint8, count=rows * ng * RVQ_STAGES)
    idx = idx.reshape(rows, ng, RVQ_STAGES).astype(np.int64)
    vec = cb[0][idx[:, :, 0]] + cb[1][idx[:, :, 1]] + cb[2][idx[:, :, 2]]  # (rows, ng, 8)
    s = np.frombuffer(buf, dtype="<f2", count=rows, offset=rows * ng * RVQ_STAGES)
    return vec.reshape(rows, cols) * s.astype(np.float64)[:, None]


def dequant(dtype, buf, rows, cols, group=0, codebook=None):
    """Dispatch on the dtype name; returns float64 (rows, cols)."""
    if dtype == "f32":
        return deq_f32(buf, rows, cols)
    if dtype == "f16":
        return deq_f16(buf, rows, cols)
    if dtype == "bf16":
        return deq_bf16(buf, rows, cols)
    if dtype == "q8":
        return deq_q8(buf, rows, cols, group)
    if dtype == "q4":
        return deq_q4(buf, rows, cols, group)
    if dtype in KQUANT_BLOCK:  # ggml's own layout; ckpt_io holds our ggml dequantisers
        import ckpt_io
        _need(buf, rows * (cols // 256) * KQUANT_BLOCK[dtype], dtype)
        ty = {"q4_k": ckpt_io.GGML_Q4_K, "q5_k": ckpt_io.GGML_Q5_K, "q6_k": ckpt_io.GGML_Q6_K}[dtype]
        return ckpt_io.dequant_ggml(ty, bytes(buf), rows * cols).astype(np.float64).reshape(rows, cols)
    if dtype in Q5_BLOCK:
        import ckpt_io
        _need(buf, rows * (cols // 32) * Q5_BLOCK[dtype], dtype)
        ty = {"q5_0": ckpt_io.GGML_Q5_0, "q5_1": ckpt_io.GGML_Q5_1}[dtype]
        return ckpt_io.dequant_ggml(ty, bytes(buf), rows * cols).astype(np.float64).reshape(rows, cols)
    if dtype == "rvq3":
        if codebook is None:
            raise FormatError("rvq3 matrix without a codebook")
        return deq_rvq3(buf, rows, cols, codebook)
    raise FormatError(f"unknown dtype {dtype!r}")


# ---------------------------------------------------------------------------
# Building blocks (MODEL.md "Building blocks"), float64
# ---------------------------------------------------------------------------


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def softmax(x):
    e = np.exp(x - np.max(x))
    return e / np.sum(e)


def swiglu(x, gate, up, down):
    return down @ (silu(gate @ x) * (up @ x))


def l2norm(v):
    return v / np.sqrt(np.sum(v * v) + 1e-6)


def rope(v, p, theta, yarn=None):
    """Rotate-half (NeoX) RoPE of an even-length vector v at position p;
    yarn = (factor, orig_ctx, beta_fast, beta_slow, mscale, unrounded) (MODEL.md "ATTN GQA")."""
    d = v.shape[-1]
    half = d // 2
    i = np.arange(half, dtype=np.float64)
    f = theta ** (-2.0 * i / d)
    ms = 1.0
    if yarn is not None:
        fac, orig, bf, bs, ms, unr = yarn
        if fac > 1.0:
            lt = 2.0 * np.log(theta)
            lo, hi = d * np.log(orig / (2 * np.pi * bf)) / lt, d * np.log(orig / (2 * np.pi * bs)) / lt
            if not unr:
                lo, hi = np.floor(lo), np.ceil(hi)
            lo, hi = max(lo, 0), min(hi, d - 1)
            r = np.clip((i - lo) / max(hi - lo, 0.001), 0, 1)
            f = f * (1 - r) + f / fac * r
    a = p * f
    c, s = np.cos(a) * ms, np.sin(a) * ms
    lo, hi = v[..., :half], v[..., half:]
    return np.concatenate([lo * c - hi * s, lo * s + hi * c], axis=-1)


def topk(scores, k):
    """Indices of the k largest scores, ordered by descending score, ties
    broken by the lower id (MODEL.md "Top-k")."""
    ids = np.arange(len(scores))
    order = np.lexsort((ids, -np.asarray(scores)))  # last key is primary
    return order[:k]


# ---------------------------------------------------------------------------
# Container reader
# ---------------------------------------------------------------------------


def _round_up(x, a):
    return (x + a - 1) // a * a


def _json_number(text):
    f = float(text)
    return int(f) if f.is_integer() and abs(f) <= 2.0 ** 53 else f


def _get(obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj:
        raise FormatError(f"manifest: missing {where}{key}")
    v = obj[key]
    if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
        raise FormatError(f"manifest: {where}{key} must be an integer")
    if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise FormatError(f"manifest: {where}{key} must be a number")
    if kind is bool and not isinstance(v, bool):
        raise FormatError(f"manifest: {where}{key} must be a boolean")
    if kind is str and not isinstance(v, str):
        raise FormatError(f"manifest: {where}{key} must be a string")
    if kind is list and not isinstance(v, list):
        raise FormatError(f"manifest: {where}{key} must be an array")
    if kind is dict and not isinstance(v, dict):
        raise FormatError(f"manifest: {where}{key} must be an object")
    return float(v) if kind is float else v


def record_layout(arch, dtype, group=0, bank_dtypes=None):
    """FORMAT.md "Record layout": ({gate, up, down: rows, cols, offset, bytes},
    payload_bytes, record_bytes) for an expert dtype and architecture. v3:
    bank_dtypes (one [gate, up, down] dtype list per bank) sizes each section
    for the largest bytes any bank needs there."""
    mo = arch["moe"]
    d_in = mo["d_latent"] if mo["d_latent"] > 0 else arch["d_model"]
    dims = {"gate": (mo["d_expert"], d_in), "up": (mo["d_expert"], d_in),
            "down": (d_in, mo["d_expert"])}
    sections, off = {}, RECORD_HEADER_BYTES
    for si, sname in enumerate(SECTIONS):
        rows, cols = dims[sname]
        if bank_dtypes:
            nb = max(dtype_matrix_bytes(bd[si], rows, cols, group) for bd in bank_dtypes)
        else:
            nb = dtype_matrix_bytes(dtype, rows, cols, group)
        sections[sname] = dict(rows=rows, cols=cols, offset=off, bytes=nb)
        end = off + nb
        off = _round_up(end, 64)
    if end >= 2 ** 32:
        raise FormatError("expert record offsets overflow 32 bits")
    return sections, end - RECORD_HEADER_BYTES, _round_up(end, PAGE)


class Container:
    """An open container directory: manifest parsed, trunk tensors and expert
    records read on demand and dequantised to float64 (cached per tensor)."""

    def __init__(self, path):
        self.dir = path
        mpath = os.path.join(path, "manifest.json")
        try:
            if os.path.getsize(mpath) > MANIFEST_MAX_BYTES:
                raise FormatError(f"{mpath}: larger than 64 MiB")
            with open(mpath, "rb") as f:
                # FORMAT.md: integers are "JSON numbers with an integral value",
                # so 4096.0 is the integer 4096 (real-valued keys are cast later).
                self.manifest = json.loads(f.read().decode("utf-8"), parse_float=_json_number)
        except (OSError, ValueError) as ex:
            raise FormatError(f"{mpath}: {ex}") from ex
        self._parse_manifest(self.manifest)
        self._cache = {}
        self._bank_files = {}

    # -- manifest ----------------------------------------------------------

    def _parse_manifest(self, m):
        """Checks what the reference relies on (not the full FORMAT.md audit,
        which is engine/format's job): format/version, the architecture keys
        it reads, the tensor table, the computed expert layout, banks, files."""
        if not isinstance(m, dict):
            raise FormatError("manifest: not a JSON object")
        if _get(m, "format", str, "") != "spill":
            raise FormatError(f"manifest: format {m['format']!r}, expected 'spill'")
        version = _get(m, "version", int, "")
        if version not in FORMAT_VERSIONS:
            raise FormatError(f"manifest: version {version}, expected one of {FORMAT_VERSIONS}")
        self.version = version
        self.container_id = 0
        if version >= 2:
            cid = _get(m, "container_id", str, "")
            if len(cid) != 16 or any(c not in "0123456789abcdef" for c in cid) or int(cid, 16) == 0:
                raise FormatError(f"manifest: container_id {cid!r} is not 16 lower-case hex digits")
            self.container_id = int(cid, 16)
        a = _get(m, "arch", dict, "")
        self.arch = a
        for key in ("vocab_size", "d_model", "n_layers", "n_dense_layers", "d_ff",
                    "bos_id", "eos_id"):
            _get(a, key, int, "arch.")
        self.eps = _get(a, "norm_eps", float, "arch.")
        if not 0 < self.eps <= 1:
            raise FormatError(f"manifest: arch.norm_eps {self.eps} out of range (0, 1]")
        if _get(a, "activation", str, "arch.") not in ("swiglu", "swiglu_oai"):
            raise FormatError(f"manifest: arch.activation {a['activation']!r} not supported")
        if not 0 <= a["n_dense_layers"] <= a["n_layers"]:
            raise FormatError("manifest: arch.n_dense_layers out of range")
        # Kimi K3's parts (docs/MODEL.md "Kimi K3 as released") are computed by
        # tools/reference/kimi_k3_ref.py from the checkpoint, not here: a
        # container that sets any of them is refused, never computed as if
        # they were absent
        k3_parts = [("arch.", a, "attn_res_block", 0), ("arch.mla.", a.get("mla") or {}, "out_gate", False),
                    ("arch.kda.", a.get("kda") or {}, "gate_lower_bound", 0),
                    ("arch.moe.", a.get("moe") or {}, "latent_norm", "input"),
                    ("arch.moe.", a.get("moe") or {}, "norm_min", 0)]
        for where, obj, key, absent in k3_parts:
            if isinstance(obj, dict) and key in obj and obj[key] != absent:
                raise FormatError(f"manifest: {where}{key} {obj[key]!r} (Kimi K3 as released) "
                                  "not supported by this reference (kimi_k3_ref.py computes it)")
        kinds = _get(a, "layer_attn", list, "arch.")
        if len(kinds) != a["n_layers"]:
            raise FormatError("manifest: arch.layer_attn length != n_layers")
        for k in kinds:
            if k not in ("gqa", "mla", "kda", "gdn"):
                raise FormatError(f"manifest: unknown attention kind {k!r}")
            _get(a, k, dict, "arch.")
        self.layer_attn = kinds
        self.bos_id = a["bos_id"]
        self.eos_id = a["eos_id"]
        if "gqa" in kinds:
            g = a["gqa"]
            for key in ("n_heads", "n_kv_heads", "head_dim"):
                _get(g, key, int, "arch.gqa.")
            _get(g, "rope_theta", float, "arch.gqa.")
            if g["n_kv_heads"] < 1 or g["n_heads"] % g["n_kv_heads"] or g["head_dim"] % 2:
                raise FormatError("manifest: arch.gqa heads/head_dim inconsistent")
            rd = g.get("rope_dim", 0)  # optional: partial RoPE (GLM-4.5)
            if not isinstance(rd, int) or isinstance(rd, bool) or rd < 0 or rd > g["head_dim"] or rd % 2:
                raise FormatError(f"manifest: arch.gqa.rope_dim {rd!r}")
            for key in ("qkv_bias", "o_bias", "out_gate", "sinks"):  # optional: biases, output gate, sinks
                if not isinstance(g.get(key, False), bool):
                    raise FormatError(f"manifest: arch.gqa.{key} {g[key]!r}")
            for key in ("swa_window", "swa_pattern", "yarn_orig_ctx"):  # optional (gpt-oss)
                if not isinstance(g.get(key, 0), int) or isinstance(g.get(key, 0), bool) or g.get(key, 0) < 0:
                    raise FormatError(f"manifest: arch.gqa.{key} {g[key]!r}")
        if "mla" in kinds:
            ml = a["mla"]
            for key in ("n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim",
                        "v_head_dim"):
                _get(ml, key, int, "arch.mla.")
            _get(ml, "use_rope", bool, "arch.mla.")
            _get(ml, "rope_theta", float, "arch.mla.")
            if ml["qk_rope_dim"] % 2:
                raise FormatError("manifest: arch.mla.qk_rope_dim must be even")
        if "gdn" in kinds:
            gd = a["gdn"]
            for key in ("n_k_heads", "n_v_heads", "head_dim", "conv_kernel"):
                _get(gd, key, int, "arch.gdn.")
            if gd["n_k_heads"] < 1 or gd["n_v_heads"] % gd["n_k_heads"] or gd["conv_kernel"] < 1:
                raise FormatError("manifest: arch.gdn heads/conv_kernel inconsistent")
        if "kda" in kinds:
            kd = a["kda"]
            for key in ("n_heads", "head_dim", "conv_kernel", "gate_rank", "out_gate_rank"):
                _get(kd, key, int, "arch.kda.")
            _get(kd, "decay_floor", float, "arch.kda.")
            if kd["conv_kernel"] < 1:
                raise FormatError("manifest: arch.kda.conv_kernel must be >= 1")

        self.tensors = {}
        for t in _get(m, "tensors", list, ""):
            name = _get(t, "name", str, "tensors[].")
            dtype = _get(t, "dtype", str, f"tensor {name}: ")
            if dtype not in DTYPE_IDS:
                raise FormatError(f"manifest: tensor {name}: unknown dtype {dtype!r}")
            shape = _get(t, "shape", list, f"tensor {name}: ")
            if len(shape) not in (1, 2) or not all(
                    isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
                raise FormatError(f"manifest: tensor {name}: bad shape {shape}")
            group = _get(t, "group", int, f"tensor {name}: ") if dtype in ("q8", "q4") else 0
            # A 1-D tensor of n elements is stored and sized as one row of n columns.
            rows, cols = (shape[0], shape[1]) if len(shape) == 2 else (1, shape[0])
            size = dtype_matrix_bytes(dtype, rows, cols, group)
            off = _get(t, "offset", int, f"tensor {name}: ")
            nbytes = _get(t, "bytes", int, f"tensor {name}: ")
            crc = _get(t, "crc32", int, f"tensor {name}: ")
            if nbytes != size:
                raise FormatError(f"manifest: tensor {name}: bytes {nbytes} != {size} for "
                                  f"{dtype} {shape}")
            if off % TENSOR_ALIGN != 0:
                raise FormatError(f"manifest: tensor {name}: offset {off} not 64-aligned")
            if name in self.tensors:
                raise FormatError(f"manifest: duplicate tensor {name}")
            self.tensors[name] = dict(dtype=dtype, shape=list(shape), rows=rows, cols=cols,
                                      group=group, offset=off, bytes=nbytes, crc32=crc)

        files = _get(m, "files", list, "")
        self.files = {}
        for f in files:
            self.files[_get(f, "name", str, "files[].")] = dict(
                bytes=_get(f, "bytes", int, "files[]."), crc32=_get(f, "crc32", int, "files[]."))
        if not files or files[0].get("name") != "trunk.bin":
            raise FormatError("manifest: files[0] must be trunk.bin")
        for name, f in self.files.items():
            path = os.path.join(self.dir, name)
            try:
                size = os.path.getsize(path)
            except OSError as ex:
                raise FormatError(f"{path}: {ex}") from ex
            if size != f["bytes"]:
                raise FormatError(f"{path}: size {size}, manifest says {f['bytes']}")
        end = max((t["offset"] + t["bytes"] for t in self.tensors.values()), default=0)
        if end > self.files["trunk.bin"]["bytes"]:
            raise FormatError("manifest: a tensor extends past the end of trunk.bin")

        self.n_moe = a["n_layers"] - a["n_dense_layers"]
        self.banks = {}
        banks = _get(m, "banks", list, "")
        if self.n_moe == 0:
            if "experts" in m or banks:
                raise FormatError("manifest: experts/banks present without MoE layers")
            return
        mo = _get(a, "moe", dict, "arch.")
        for key in ("n_experts", "top_k", "d_expert", "n_shared", "d_shared", "d_latent"):
            _get(mo, key, int, "arch.moe.")
        _get(mo, "routed_scale", float, "arch.moe.")
        _get(mo, "norm_topk", bool, "arch.moe.")
        if _get(mo, "router", str, "arch.moe.") not in ("sigmoid", "softmax", "softmax_topk"):
            raise FormatError(f"manifest: arch.moe.router {mo['router']!r}")
        if not 1 <= mo["top_k"] <= mo["n_experts"]:
            raise FormatError("manifest: arch.moe.top_k out of range")
        ex = _get(m, "experts", dict, "")
        dt = _get(ex, "dtype", str, "experts.")
        if dt not in DTYPE_IDS:
            raise FormatError(f"manifest: experts.dtype {dt!r}")
        self.expert_dtype = dt
        self.expert_group = _get(ex, "group", int, "experts.") if dt in ("q8", "q4") else 0
        # The layout is computed from the architecture and the manifest's
        # statement of it must agree.
        # v3: per-bank section dtypes (FORMAT.md banks[i].dtypes)
        self.bank_dtypes = {}
        for i, b in enumerate(banks):
            bd = b.get("dtypes", [dt] * 3) if isinstance(b, dict) and version >= 3 else [dt] * 3
            if (not isinstance(bd, list) or len(bd) != 3 or any(x not in DTYPE_IDS for x in bd)
                    or any((x == "rvq3") != (dt == "rvq3") for x in bd)
                    or any(x in ("q8", "q4") and not self.expert_group for x in bd)):
                raise FormatError(f"manifest: banks[{i}].dtypes {bd!r}")
            self.bank_dtypes[a["n_dense_layers"] + i] = bd
        self.sections, self.payload_bytes, self.record_bytes = record_layout(
            a, dt, self.expert_group, list(self.bank_dtypes.values()) if version >= 3 else None)
        stated = _get(ex, "sections", list, "experts.")
        if [s.get("name") for s in stated] != list(SECTIONS) or any(
                {k: s.get(k) for k in ("rows", "cols", "offset", "bytes")} != self.sections[s["name"]]
                for s in stated):
            raise FormatError(f"manifest: experts.sections {stated} differ from the computed "
                              f"layout {self.sections}")
        if (_get(ex, "record_bytes", int, "experts."), _get(ex, "payload_bytes", int, "experts.")) \
                != (self.record_bytes, self.payload_bytes):
            raise FormatError("manifest: experts.record_bytes/payload_bytes differ from the "
                              "computed layout")
        if len(banks) != self.n_moe:
            raise FormatError(f"manifest: {len(banks)} banks for {self.n_moe} MoE layers")
        for i, b in enumerate(banks):
            layer = a["n_dense_layers"] + i
            want = dict(layer=layer, file=f"experts-{layer:03d}.bin",
                        n_experts=mo["n_experts"], record_bytes=self.record_bytes,
                        data_offset=BANK_HEADER_BYTES)
            got = {k: b.get(k) for k in want} if isinstance(b, dict) else None
            extra = set(b) - set(want) - ({"dtypes"} if version >= 3 else set()) if got else set()
            if got != want or extra:
                raise FormatError(f"manifest: banks[{i}] is {b}, expected {want}")
            fsize = self.files.get(want["file"], {}).get("bytes")
            if fsize != BANK_HEADER_BYTES + mo["n_experts"] * self.record_bytes:
                raise FormatError(f"manifest: files entry of {want['file']} missing or wrong size")
            self.banks[layer] = want
        for layer in self.banks if dt == "rvq3" else ():
            for sname in SECTIONS:
                name = f"blk.{layer}.ffn_{sname}_exps.codebook"
                t = self.tensors.get(name)
                if t is None or t["dtype"] != "f32" or t["shape"] != [768, 8]:
                    raise FormatError(f"manifest: rvq3 experts need the f32 [768, 8] tensor {name}")

    # -- trunk -------------------------------------------------------------

    def tensor(self, name):
        """Trunk tensor as float64: (rows, cols) for matrices, (n,) for vectors."""
        if name in self._cache:
            return self._cache[name]
        t = self.tensors.get(name)
        if t is None:
            raise FormatError(f"trunk: missing tensor {name}")
        if t["dtype"] == "rvq3":
            raise FormatError(f"trunk: tensor {name}: rvq3 is for experts only")
        path = os.path.join(self.dir, "trunk.bin")
        with open(path, "rb") as f:
            f.seek(t["offset"])
            buf = f.read(t["bytes"])
        if len(buf) != t["bytes"]:
            raise FormatError(f"{path}: tensor {name} extends past the end of the file")
        if zlib.crc32(buf) != t["crc32"]:
            raise FormatError(f"{path}: tensor {name}: crc32 mismatch")
        w = dequant(t["dtype"], buf, t["rows"], t["cols"], t["group"])
        if len(t["shape"]) == 1:
            w = w.reshape(-1)
        self._cache[name] = w
        return w

    # -- banks -------------------------------------------------------------

    def _bank(self, layer):
        b = self.banks.get(layer)
        if b is None:
            raise FormatError(f"no bank for layer {layer}")
        if layer not in self._bank_files:
            path = os.path.join(self.dir, b["file"])
            with open(path, "rb") as f:
                page = f.read(BANK_HEADER_BYTES)
            self._check_bank_header(path, b, page)
            self._bank_files[layer] = path
        return b, self._bank_files[layer]

    def _check_bank_header(self, path, b, page):
        if len(page) != BANK_HEADER_BYTES:
            raise FormatError(f"{path}: short bank header")
        if page[:8] != BANK_MAGIC:
            raise FormatError(f"{path}: bad bank magic")
        version, layer, n_experts, dtype = struct.unpack_from("<4I", page, 8)
        record_bytes, data_offset = struct.unpack_from("<2Q", page, 24)
        header_crc = struct.unpack_from("<I", page, 40)[0]
        zeroed = bytearray(page)
        zeroed[40:44] = bytes(4)
        if zlib.crc32(bytes(zeroed)) != header_crc:
            raise FormatError(f"{path}: bank header crc mismatch")
        rsv = 55 if self.version >= 3 else 52 if self.version >= 2 else 44
        if self.version >= 3 and list(page[52:55]) != [DTYPE_IDS[x] for x in self.bank_dtypes[b["layer"]]]:
            raise FormatError(f"{path}: bank section dtypes {list(page[52:55])} disagree with manifest")
        if any(page[rsv:]):
            raise FormatError(f"{path}: bank header reserved bytes not zero")
        cid = struct.unpack_from("<Q", page, 44)[0] if self.version >= 2 else 0
        exp = (self.version, b["layer"], b["n_experts"], DTYPE_IDS[self.expert_dtype],
               b["record_bytes"], b["data_offset"], self.container_id)
        got = (version, layer, n_experts, dtype, record_bytes, data_offset, cid)
        if got != exp:
            raise FormatError(f"{path}: bank header {got} disagrees with manifest {exp}")

    def record(self, layer, expert):
        """Raw bytes of expert record (layer, expert), header checked."""
        b, path = self._bank(layer)
        if not 0 <= expert < b["n_experts"]:
            raise FormatError(f"layer {layer}: expert {expert} out of range")
        off = b["data_offset"] + expert * b["record_bytes"]
        with open(path, "rb") as f:
            f.seek(off)
            rec = f.read(b["record_bytes"])
        where = f"{path} layer {layer} expert {expert}"
        if len(rec) != b["record_bytes"]:
            raise FormatError(f"{where}: short record")
        (magic, version, dtype, rlayer, rexpert, payload_off, payload_bytes, payload_crc,
         header_crc) = struct.unpack_from("<IHHIIIIII", rec, 0)
        sect_off = struct.unpack_from("<3I", rec, 32)
        n_sections = struct.unpack_from("<I", rec, 44)[0]
        zeroed = bytearray(rec[:RECORD_HEADER_BYTES])
        zeroed[28:32] = b"\0\0\0\0"
        if magic != RECORD_MAGIC:
            raise FormatError(f"{where}: bad record magic {magic:#x}")
        if zlib.crc32(bytes(zeroed)) != header_crc:
            raise FormatError(f"{where}: record header crc mismatch")
        rsv = 59 if self.version >= 3 else 56 if self.version >= 2 else 48
        if self.version >= 3 and list(rec[56:59]) != [DTYPE_IDS[x] for x in self.bank_dtypes[layer]]:
            raise FormatError(f"{where}: record section dtypes {list(rec[56:59])} disagree with manifest")
        if any(rec[rsv:64]):
            raise FormatError(f"{where}: record header reserved bytes not zero")
        cid = struct.unpack_from("<Q", rec, 48)[0] if self.version >= 2 else 0
        if cid != self.container_id:
            raise FormatError(f"{where}: record of container {cid:016x}, this container is "
                              f"{self.container_id:016x} (from another model)")
        if (version, dtype, rlayer, rexpert, n_sections) != \
                (self.version, DTYPE_IDS[self.expert_dtype], layer, expert, 3):
            raise FormatError(f"{where}: record header fields disagree "
                              f"{(version, dtype, rlayer, rexpert, n_sections)}")
        if payload_off != RECORD_HEADER_BYTES or payload_bytes != self.payload_bytes:
            raise FormatError(f"{where}: payload offset/size {payload_off}/{payload_bytes} "
                              f"disagree with the manifest")
        if zlib.crc32(rec[payload_off:payload_off + payload_bytes]) != payload_crc:
            raise FormatError(f"{where}: payload crc mismatch")
        if tuple(self.sections[s]["offset"] for s in SECTIONS) != sect_off:
            raise FormatError(f"{where}: section offsets {sect_off} disagree with manifest")
        return rec

    def expert(self, layer, expert):
        """(gate, up, down) float64 matrices of one routed expert."""
        key = ("expert", layer, expert)
        if key in self._cache:
            return self._cache[key]
        rec = self.record(layer, expert)
        mats = []
        for si, sname in enumerate(SECTIONS):
            s = self.sections[sname]
            cb = None
            if self.expert_dtype == "rvq3":
                cb = self.tensor(f"blk.{layer}.ffn_{sname}_exps.codebook")
            sdt = self.bank_dtypes[layer][si]
            nb = dtype_matrix_bytes(sdt, s["rows"], s["cols"], self.expert_group)
            buf = rec[s["offset"]:s["offset"] + nb]
            if any(rec[s["offset"] + nb:s["offset"] + s["bytes"]]):
                raise FormatError(f"layer {layer} expert {expert}: section {sname}: bytes after "
                                  f"its {nb} bytes of {sdt} are not zero")
            mats.append(dequant(sdt, buf, s["rows"], s["cols"], self.expert_group, cb))
        self._cache[key] = tuple(mats)
        return self._cache[key]


# ---------------------------------------------------------------------------
# Forward pass (MODEL.md "Forward pass of one token at position p")
# ---------------------------------------------------------------------------


class Forward:
    """Runs tokens one at a time at positions 0, 1, ..., keeping per-layer
    caches (GQA k/v, MLA latent c and kr) and states (KDA S and conv rings).

    Every weight is fetched through M()/V(), which check the shape MODEL.md
    gives it. router_margins collects (position, layer, gap) for every MoE
    evaluation, the gap between the k-th selected selection key and the best
    unselected one: near zero, an f32 engine may legitimately pick others."""

    def __init__(self, c):
        self.c = c
        self.a = c.arch
        self.D = self.a["d_model"]
        self.pos = 0
        self.state = [dict() for _ in range(self.a["n_layers"])]
        self.router_margins = []

    def M(self, name, rows, cols):
        w = self.c.tensor(name)
        if w.shape != (rows, cols):
            raise FormatError(f"tensor {name}: shape {list(w.shape)}, MODEL.md wants "
                              f"[{rows}, {cols}]")
        return w

    def V(self, name, n):
        w = self.c.tensor(name)
        if w.shape != (n,):
            raise FormatError(f"tensor {name}: shape {list(w.shape)}, MODEL.md wants [{n}]")
        return w

    # -- attention (MODEL.md "ATTN ...") ------------------------------------

    def attn_gqa(self, l, h, p):
        g, D = self.a["gqa"], self.D
        H, Hk, d, theta = g["n_heads"], g["n_kv_heads"], g["head_dim"], float(g["rope_theta"])
        gated = g.get("out_gate", False)  # Qwen3.5: each head's query rows, then its gate rows
        q = (self.M(f"blk.{l}.attn_q", (2 if gated else 1) * H * d, D) @ h).reshape(H, -1)
        gate = q[:, d:] if gated else None
        q = q[:, :d]
        k = (self.M(f"blk.{l}.attn_k", Hk * d, D) @ h).reshape(Hk, d)
        v = (self.M(f"blk.{l}.attn_v", Hk * d, D) @ h).reshape(Hk, d)
        if g.get("qkv_bias", False):  # GLM-4.5
            q = q + self.V(f"blk.{l}.attn_q_bias", H * d).reshape(H, d)
            k = k + self.V(f"blk.{l}.attn_k_bias", Hk * d).reshape(Hk, d)
            v = v + self.V(f"blk.{l}.attn_v_bias", Hk * d).reshape(Hk, d)
        qn, eps = g.get("qk_norm", "none"), self.c.eps
        if qn == "head":  # per head over d (Qwen3-MoE)
            wq, wk = self.V(f"blk.{l}.attn_q_norm", d), self.V(f"blk.{l}.attn_k_norm", d)
            q = np.stack([rmsnorm(r, wq, eps) for r in q])
            k = np.stack([rmsnorm(r, wk, eps) for r in k])
        elif qn == "full":  # over the whole projection (OLMoE)
            q = rmsnorm(q.reshape(-1), self.V(f"blk.{l}.attn_q_norm", H * d), eps).reshape(H, d)
            k = rmsnorm(k.reshape(-1), self.V(f"blk.{l}.attn_k_norm", Hk * d), eps).reshape(Hk, d)
        elif qn != "none":
            raise FormatError(f"manifest: arch.gqa.qk_norm {qn!r}")
        rd = g.get("rope_dim", 0) or d  # rotate-half on the first rd dims of each head
        yarn = (float(g.get("yarn_factor", 0) or 0), g.get("yarn_orig_ctx", 0), float(g.get("yarn_beta_fast", 0) or 0),
                float(g.get("yarn_beta_slow", 0) or 0), float(g.get("rope_mscale", 0) or 1.0),
                bool(g.get("yarn_unrounded", False)))
        q = np.concatenate([rope(q[:, :rd], p, theta, yarn), q[:, rd:]], axis=1)
        k = np.concatenate([rope(k[:, :rd], p, theta, yarn), k[:, rd:]], axis=1)
        st = self.state[l]
        st.setdefault("k", []).append(k)
        st.setdefault("v", []).append(v)
        W, P = g.get("swa_window", 0), g.get("swa_pattern", 0)
        t0 = max(0, p + 1 - W) if W > 0 and (P == 0 or l % P < P - 1) else 0  # sliding layer
        K = np.stack(st["k"][t0:])  # (t, Hk, d), t = t0..p
        V = np.stack(st["v"][t0:])  # (t, Hk, d)
        sinks = self.V(f"blk.{l}.attn_sinks", H) if g.get("sinks", False) else None
        o = np.empty((H, d))
        for j in range(H):
            kvh = j // (H // Hk)
            z = K[:, kvh, :] @ q[j] / np.sqrt(d)  # (t)
            if sinks is None:
                a = softmax(z)
            else:  # the head's sink logit joins the denominator
                m = max(np.max(z), sinks[j])
                a = np.exp(z - m) / (np.sum(np.exp(z - m)) + np.exp(sinks[j] - m))
            o[j] = a @ V[:, kvh, :]
        if gated:
            o = o * sigmoid(gate)
        out = self.M(f"blk.{l}.attn_output", D, H * d) @ o.reshape(-1)
        if g.get("o_bias", False):
            out = out + self.V(f"blk.{l}.attn_output_bias", D)
        return out

    def attn_mla(self, l, h, p):
        m, D, eps = self.a["mla"], self.D, self.c.eps
        H, dn, dr, dv, dc, ql = (m["n_heads"], m["qk_nope_dim"], m["qk_rope_dim"],
                                 m["v_head_dim"], m["kv_lora_rank"], m["q_lora_rank"])
        if ql > 0:
            cq = rmsnorm(self.M(f"blk.{l}.attn_q_a", ql, D) @ h,
                         self.V(f"blk.{l}.attn_q_a_norm", ql), eps)
            q = self.M(f"blk.{l}.attn_q_b", H * (dn + dr), ql) @ cq
        else:
            q = self.M(f"blk.{l}.attn_q", H * (dn + dr), D) @ h
        q = q.reshape(H, dn + dr)
        qn, qr = q[:, :dn], q[:, dn:]
        kv = self.M(f"blk.{l}.attn_kv_a", dc + dr, D) @ h             # (dc + dr)
        c = rmsnorm(kv[:dc], self.V(f"blk.{l}.attn_kv_a_norm", dc), m.get("kv_norm_eps") or eps)
        kr = kv[dc:dc + dr]
        if m["use_rope"]:
            theta = float(m["rope_theta"])
            qr, kr = rope(qr, p, theta), rope(kr, p, theta)
        st = self.state[l]
        st.setdefault("c", []).append(c)
        st.setdefault("kr", []).append(kr)
        C = np.stack(st["c"])    # (t, dc)  the latent cache
        KR = np.stack(st["kr"])  # (t, dr)
        kvb = self.M(f"blk.{l}.attn_kv_b", H * (dn + dv), dc).reshape(H, dn + dv, dc)
        o = np.empty((H, dv))
        for j in range(H):
            wuk, wuv = kvb[j, :dn, :], kvb[j, dn:, :]        # (dn, dc), (dv, dc)
            qa = wuk.T @ qn[j]                               # (dc) absorbed query
            score = (C @ qa + KR @ qr[j]) / np.sqrt(dn + dr)  # (t)
            ol = softmax(score) @ C                          # (dc)
            o[j] = wuv @ ol                                  # (dv)
        return self.M(f"blk.{l}.attn_output", D, H * dv) @ o.reshape(-1)

    def attn_kda(self, l, h, p):
        kd, D, eps = self.a["kda"], self.D, self.c.eps
        H, d, K, r, rg = (kd["n_heads"], kd["head_dim"], kd["conv_kernel"], kd["gate_rank"],
                          kd["out_gate_rank"])
        floor = float(kd["decay_floor"])
        st = self.state[l]
        if not st:  # position 0: zero state, zero conv history
            st["S"] = np.zeros((H, d, d))
            for n in "qkv":
                st["ring_" + n] = np.zeros((K - 1, H * d))  # previous pre-conv inputs
        conv = {}
        for n in "qkv":
            x = self.M(f"blk.{l}.attn_{n}", H * d, D) @ h                # (H*d)
            window = np.vstack([st["ring_" + n], x[None, :]])           # (K, H*d), oldest first
            wc = self.M(f"blk.{l}.attn_{n}_conv", H * d, K)              # (H*d, K)
            conv[n] = silu(np.sum(wc.T * window, axis=0))                # W[c][K-1] hits x_p
            st["ring_" + n] = window[1:]
        f = self.M(f"blk.{l}.attn_f_b", H * d, r) @ (self.M(f"blk.{l}.attn_f_a", r, D) @ h) \
            + self.V(f"blk.{l}.attn_dt_bias", H * d)                     # (H*d)
        a_log = np.repeat(self.V(f"blk.{l}.attn_a_log", H), d)           # head j -> its d channels
        g = -np.exp(a_log) * softplus(f)
        if floor < 0:
            g = np.maximum(g, floor)
        alpha = np.exp(g).reshape(H, d)
        beta = sigmoid(self.M(f"blk.{l}.attn_b", H, D) @ h)             # (H)
        if rg == 0:
            gate_out = self.M(f"blk.{l}.attn_g", H * d, D) @ h
        else:
            gate_out = self.M(f"blk.{l}.attn_g_b", H * d, rg) @ (
                self.M(f"blk.{l}.attn_g_a", rg, D) @ h)
        gate_out = gate_out.reshape(H, d)
        onorm = self.V(f"blk.{l}.attn_o_norm", d)
        qv, kv, vv = (conv[n].reshape(H, d) for n in "qkv")
        o = np.empty((H, d))
        for j in range(H):
            qh = l2norm(qv[j]) / np.sqrt(d)
            kh = l2norm(kv[j])
            vh = vv[j]
            S = alpha[j][:, None] * st["S"][j]                # row i scaled by alpha_j[i]
            S = S + np.outer(kh, beta[j] * (vh - S.T @ kh))   # delta rule
            st["S"][j] = S
            o[j] = rmsnorm(S.T @ qh, onorm, eps) * sigmoid(gate_out[j])
        return self.M(f"blk.{l}.attn_output", D, H * d) @ o.reshape(-1)

    def attn_gdn(self, l, h, p):
        gd, D, eps = self.a["gdn"], self.D, self.c.eps
        Hk, Hv, d, K = gd["n_k_heads"], gd["n_v_heads"], gd["head_dim"], gd["conv_kernel"]
        C = (2 * Hk + Hv) * d
        st = self.state[l]
        if not st:  # position 0: zero state, zero conv history
            st["S"] = np.zeros((Hv, d, d))
            st["ring"] = np.zeros((K - 1, C))
        x = self.M(f"blk.{l}.attn_qkv", C, D) @ h                       # (C) q, k, v
        window = np.vstack([st["ring"], x[None, :]])                     # (K, C), oldest first
        xc = silu(np.sum(self.M(f"blk.{l}.ssm_conv", C, K).T * window, axis=0))
        st["ring"] = window[1:]
        q, k, v = (xc[:Hk * d].reshape(Hk, d), xc[Hk * d:2 * Hk * d].reshape(Hk, d),
                   xc[2 * Hk * d:].reshape(Hv, d))
        z = (self.M(f"blk.{l}.attn_gate", Hv * d, D) @ h).reshape(Hv, d)
        g = softplus(self.M(f"blk.{l}.ssm_alpha", Hv, D) @ h + self.V(f"blk.{l}.ssm_dt_bias", Hv)) \
            * self.V(f"blk.{l}.ssm_a", Hv)                               # (Hv) log decay
        beta = sigmoid(self.M(f"blk.{l}.ssm_beta", Hv, D) @ h)          # (Hv)
        w = self.V(f"blk.{l}.ssm_norm", d)
        o = np.empty((Hv, d))
        for j in range(Hv):
            kh_ = j % Hk  # llama.cpp's tiled order
            qh = q[kh_] / np.sqrt(np.sum(q[kh_] ** 2) + eps) / np.sqrt(d)
            kh = k[kh_] / np.sqrt(np.sum(k[kh_] ** 2) + eps)
            S = np.exp(g[j]) * st["S"][j]
            S = S + np.outer(kh, beta[j] * (v[j] - S.T @ kh))
            st["S"][j] = S
            o[j] = rmsnorm(S.T @ qh, w, eps) * silu(z[j])
        return self.M(f"blk.{l}.attn_output", D, Hv * d) @ o.reshape(-1)

    # -- feed-forward (MODEL.md "DENSE", "MOE") ----------------------------

    def dense(self, l, h):
        D, F = self.D, self.a["d_ff"]
        return swiglu(h, self.M(f"blk.{l}.ffn_gate", F, D), self.M(f"blk.{l}.ffn_up", F, D),
                      self.M(f"blk.{l}.ffn_down", D, F))

    def moe(self, l, h):
        mo, D, eps = self.a["moe"], self.D, self.c.eps
        E, k, dl = mo["n_experts"], mo["top_k"], mo["d_latent"]
        s = self.M(f"blk.{l}.ffn_gate_inp", E, D) @ h                # (E) router logits
        if mo.get("router_bias", False):
            s = s + self.V(f"blk.{l}.ffn_gate_inp_bias", E)
        if mo["router"] == "softmax_topk":  # top-k of the logits, softmax over the k
            score = s
            key = s
        elif mo["router"] == "sigmoid":
            score = sigmoid(s)
            key = score + self.V(f"blk.{l}.exp_probs_b", E)           # the bias only selects
        else:
            score = softmax(s)
            key = score
        ng = int(mo.get("n_group", 0) or 0)
        if ng > 1:  # group limit (MODEL.md "MOE(l)"): keep the topk_group best groups
            gs = key.reshape(ng, E // ng)
            srt = np.sort(gs, axis=1)
            gsc = srt[:, -2:].sum(1) if mo.get("group_score", "max") == "top2" else srt[:, -1]
            keep = np.zeros(ng, bool)
            keep[topk(gsc, int(mo.get("topk_group", ng)))] = True
            drop = 0.0 if mo.get("group_mask", "inf") == "zero" else -np.inf
            key = np.where(np.repeat(keep, E // ng), key, drop)
        sel = topk(key, k)
        if k < E:
            margin = float(key[sel[-1]] - np.max(np.delete(key, sel)))
            self.router_margins.append((self.pos, l, margin))
        w = score[sel]
        if mo["router"] == "softmax_topk":
            w = softmax(w)
        if mo["norm_topk"]:
            w = w / np.sum(w)
        w = w * float(mo["routed_scale"])
        if dl > 0:
            u = rmsnorm(self.M(f"blk.{l}.moe_down_proj", dl, D) @ h,
                        self.V(f"blk.{l}.moe_latent_norm", dl), eps)
        else:
            u = h
        y = np.zeros_like(u)
        oai = self.a["activation"] == "swiglu_oai"
        eb = mo.get("expert_bias", False)
        if eb:
            F, din = mo["d_expert"], u.shape[0]
            bg, bu = self.M(f"blk.{l}.ffn_gate_exps_bias", E, F), self.M(f"blk.{l}.ffn_up_exps_bias", E, F)
            bd = self.M(f"blk.{l}.ffn_down_exps_bias", E, din)
        for wi, e in zip(w, sel):  # summed in selection order
            gate, up, down = self.c.expert(l, int(e))
            if eb or oai:
                gg, uu = gate @ u, up @ u
                if eb:
                    gg, uu = gg + bg[e], uu + bu[e]
                if oai:  # gpt-oss's clamped SwiGLU
                    gg, uu = np.minimum(gg, 7.0), np.clip(uu, -7.0, 7.0)
                    act = gg * sigmoid(1.702 * gg) * (uu + 1.0)
                else:
                    act = silu(gg) * uu
                ye = down @ act
                y = y + wi * (ye + bd[e] if eb else ye)
            else:
                y = y + wi * swiglu(u, gate, up, down)
        if dl > 0:
            y = self.M(f"blk.{l}.moe_up_proj", D, dl) @ y
        if mo["n_shared"] > 0:
            S = mo["n_shared"] * mo["d_shared"]
            ys = swiglu(h, self.M(f"blk.{l}.ffn_gate_shexp", S, D),
                        self.M(f"blk.{l}.ffn_up_shexp", S, D),
                        self.M(f"blk.{l}.ffn_down_shexp", D, S))
            if mo.get("shared_gate", False):  # Qwen3.5: sigmoid(ffn_gate_inp_shexp h)
                ys = ys * sigmoid(float(self.M(f"blk.{l}.ffn_gate_inp_shexp", 1, D) @ h))
            y = y + ys
        return y

    # -- one token ---------------------------------------------------------

    def step(self, token):
        """Runs one token at the next position; returns float64 logits (vocab)."""
        a, D, eps, p = self.a, self.D, self.c.eps, self.pos
        Vocab = a["vocab_size"]
        if not 0 <= token < Vocab:
            raise ValueError(f"token {token} outside vocab {Vocab}")
        x = self.M("tok_embd", Vocab, D)[token].copy()                # (D)
        attn = {"gqa": self.attn_gqa, "mla": self.attn_mla, "kda": self.attn_kda,
                "gdn": self.attn_gdn}
        for l in range(a["n_layers"]):
            h = rmsnorm(x, self.V(f"blk.{l}.attn_norm", D), eps)
            x = x + attn[self.c.layer_attn[l]](l, h, p)
            h = rmsnorm(x, self.V(f"blk.{l}.ffn_norm", D), eps)
            x = x + (self.dense(l, h) if l < a["n_dense_layers"] else self.moe(l, h))
        self.pos += 1
        return self.M("output", Vocab, D) @ rmsnorm(x, self.V("output_norm", D), eps)


def tokenize(text, bos_id):
    """Byte tokenizer (MODEL.md "Tokens"): UTF-8 bytes, BOS prepended if >= 0."""
    toks = list(text.encode("utf-8"))
    return ([bos_id] if bos_id is not None and bos_id >= 0 else []) + toks


def forward_all(container, tokens, stats=None):
    """Logits at every position: float64 array (len(tokens), vocab).
    container: a directory path or a Container. stats (a dict, optional)
    receives 'router_margins', a list of (position, layer, margin) with the
    gap between the k-th selected and the best unselected selection key of
    every MoE evaluation (top_k < n_experts), and their minimum as
    'min_router_margin' (None without any). A margin near 0 (below ~1e-5)
    means an f32 engine may legitimately route differently at that position."""
    c = container if isinstance(container, Container) else Container(container)
    fw = Forward(c)
    out = np.stack([fw.step(int(t)) for t in tokens])
    if stats is not None:
        stats["router_margins"] = fw.router_margins
        stats["min_router_margin"] = (min(m for _, _, m in fw.router_margins)
                                      if fw.router_margins else None)
    return out


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def load_logits(path, vocab):
    """Logits written by another implementation: .npy, or raw little-endian
    f32 of n*vocab values. Returns float64 (n, vocab)."""
    if path.endswith(".npy"):
        a = np.load(path).astype(np.float64)
    else:
        a = np.fromfile(path, dtype="<f4").astype(np.float64)
    if a.size == 0 or a.size % vocab != 0:
        raise ValueError(f"{path}: {a.size} values, not a multiple of vocab {vocab}")
    return a.reshape(-1, vocab)


def compare_logits(ref, other):
    """Agreement of two (n, vocab) logit arrays: max |diff|, the logit scale
    (max |ref|), their ratio, and where the worst difference is."""
    if ref.shape != other.shape:
        raise ValueError(f"shapes differ: reference {ref.shape}, other {other.shape}")
    diff = np.abs(ref - other)
    pos, tok = np.unravel_index(int(np.argmax(diff)), diff.shape)
    scale = float(np.max(np.abs(ref)))
    worst = float(diff[pos, tok])
    return dict(max_abs=worst, scale=scale, rel=worst / max(scale, 1e-30),
                position=int(pos), token=int(tok),
                argmax_agree=bool(np.all(np.argmax(ref, 1) == np.argmax(other, 1))))


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Independent numpy reference of the spill forward pass (float64).")
    ap.add_argument("model", help="container directory")
    ap.add_argument("--prompt", help="text, byte-tokenized with BOS")
    ap.add_argument("--tokens", help="comma-separated token ids (instead of --prompt)")
    ap.add_argument("--logits-out", help="write logits: .npy (numpy) or any other name for "
                    "raw little-endian f32")
    ap.add_argument("--all-positions", action="store_true",
                    help="write every position's logits (n_tokens, vocab); default: last only")
    ap.add_argument("--print", dest="print_logits", action="store_true",
                    help="print per-position argmax and the first logits")
    ap.add_argument("--compare", metavar="FILE",
                    help="logits of another implementation (raw f32 or .npy; all positions, "
                    "or only the last): print max |diff| relative to the logit scale "
                    "max |ref|; exit status 2 if above --tol")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="relative tolerance for --compare (default 1e-4)")
    args = ap.parse_args(argv)

    try:
        c = Container(args.model)
        if args.tokens is not None:
            tokens = [int(t) for t in args.tokens.split(",") if t.strip() != ""]
        elif args.prompt is not None:
            tokens = tokenize(args.prompt, c.bos_id)
        else:
            ap.error("give --prompt or --tokens")
        if not tokens:
            ap.error("no tokens")
        stats = {}
        logits = forward_all(c, tokens, stats)
    except (FormatError, ValueError, OSError) as ex:
        print(f"spill_ref: error: {ex}", file=sys.stderr)
        return 1

    if args.print_logits:
        for i, (t, row) in enumerate(zip(tokens, logits)):
            head = " ".join(f"{v:.6f}" for v in row[:8])
            print(f"pos {i} token {t} argmax {int(np.argmax(row))} logits[:8] {head}")
    out = (logits if args.all_positions else logits[-1:]).astype("<f4")
    if not args.all_positions:
        out = out.reshape(-1)
    if args.logits_out:
        if args.logits_out.endswith(".npy"):
            np.save(args.logits_out, out)
        else:
            with open(args.logits_out, "wb") as f:
                f.write(out.tobytes())
        shape = "x".join(str(s) for s in out.shape)
        print(f"wrote {args.logits_out}: f32 little-endian, shape {shape} "
              f"(n_tokens={len(tokens)}, vocab={logits.shape[1]})")
    print(f"tokens {len(tokens)} argmax_last {int(np.argmax(logits[-1]))} "
          f"min_router_margin {stats.get('min_router_margin')}")
    if args.compare:
        try:
            other = load_logits(args.compare, logits.shape[1])
            ref = logits if other.shape[0] == logits.shape[0] else logits[-1:]
            r = compare_logits(ref, other)
        except (ValueError, OSError) as ex:
            print(f"spill_ref: error: {ex}", file=sys.stderr)
            return 1
        if ref.shape[0] == 1 and logits.shape[0] > 1:
            print("compare: other file holds one position: compared with the last")
        near = [(p, l, m) for p, l, m in stats["router_margins"] if m < 1e-5]
        if near:
            print(f"compare: warning: near-tie routing (margin < 1e-5) at (position, layer) "
                  f"{[(p, l) for p, l, _ in near]}: f32 may legitimately route differently")
        verdict = "ok" if r["rel"] <= args.tol else "FAIL"
        print(f"compare: max_abs_diff {r['max_abs']:.3e} scale {r['scale']:.4f} "
              f"rel {r['rel']:.3e} tol {args.tol:g} at position {r['position']} "
              f"token {r['token']} argmax_agree {r['argmax_agree']}: {verdict}")
        if verdict != "ok":
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
