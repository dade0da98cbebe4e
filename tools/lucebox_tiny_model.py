"""A small Lucebox-servable model made on the machine: random weights in the real tensor layout of the
`qwen3` architecture dflash_server serves (src/common/backend_factory.cpp -> Qwen3Backend), written with
the `gguf` package the tree vendors (server/deps/llama.cpp/gguf-py; numpy and PyYAML from the machine).

  python3 tools/lucebox_tiny_model.py OUT.gguf [--gguf-py DIR] [--layers 2] [--embd 64] [--json FILE]

What the code fixes and what it reads (Luce-Org/lucebox 62880e2, src/qwen3/qwen3_loader.cpp):
  read from the GGUF: qwen3.embedding_length, .feed_forward_length, .attention.head_count(_kv),
  .block_count, .context_length, .attention.key_length, .rope.freq_base -> all small here;
  fixed in the code: n_vocab = 151936 (qwen3_drafter_model.h: `int n_vocab = 151936;`, never read from
  the file) -> token_embd is [n_embd, 151936] and the tokenizer lists 151936 tokens (synthetic: the 256
  byte tokens of byte-level BPE, ChatML's specials, then fillers), else the loader reads past the tensor.
Weights are BF16 (what the loader detects and converts from; norms F32), N(0, 0.02), seeded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

N_VOCAB_FIXED = 151936  # qwen3_drafter_model.h at 62880e2
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 single-byte tokens of a byte-level BPE vocabulary."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def bf16(a):
    """float32 array -> its bfloat16 bits (round to nearest even), uint16."""
    import numpy as np  # lazy: the model is written on the GPU machine, numpy only there, 60 ms

    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write(out: Path, *, layers: int = 2, embd: int = 64, heads: int = 4, heads_kv: int = 2, head_dim: int = 16,
          ff: int = 128, ctx: int = 2048, seed: int = 1234) -> dict:
    import gguf  # lazy: from the tree's gguf-py (sys.path set by main), 150 ms
    import numpy as np  # lazy: see bf16, 60 ms

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(out), "qwen3")
    w.add_name("lucepatch tiny qwen3 (random weights)")
    w.add_uint32("qwen3.embedding_length", embd)
    w.add_uint32("qwen3.feed_forward_length", ff)
    w.add_uint32("qwen3.attention.head_count", heads)
    w.add_uint32("qwen3.attention.head_count_kv", heads_kv)
    w.add_uint32("qwen3.block_count", layers)
    w.add_uint32("qwen3.context_length", ctx)
    w.add_uint32("qwen3.attention.key_length", head_dim)
    w.add_uint32("qwen3.attention.value_length", head_dim)
    w.add_float32("qwen3.rope.freq_base", 1000000.0)
    w.add_float32("qwen3.attention.layer_norm_rms_epsilon", 1e-6)
    toks = byte_tokens() + SPECIALS
    toks += [f"<|lp_filler_{i}|>" for i in range(N_VOCAB_FIXED - len(toks))]
    types = [1] * 256 + [3] * len(SPECIALS) + [1] * (N_VOCAB_FIXED - 256 - len(SPECIALS))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges([])
    w.add_bos_token_id(256)
    w.add_eos_token_id(258)
    w.add_uint32("tokenizer.ggml.eot_token_id", 258)
    w.add_chat_template(CHATML)

    def mat(rows: int, cols: int, name: str) -> None:  # ggml ne = [cols, rows]
        w.add_tensor(name, bf16(rng.normal(0, 0.02, (rows, cols))), raw_shape=(rows, cols),
                     raw_dtype=gguf.GGMLQuantizationType.BF16)

    def vec(n: int, name: str) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    mat(N_VOCAB_FIXED, embd, "token_embd.weight")  # output.weight omitted: tied (the loader copies it)
    vec(embd, "output_norm.weight")
    for i in range(layers):
        vec(embd, f"blk.{i}.attn_norm.weight")
        mat(heads * head_dim, embd, f"blk.{i}.attn_q.weight")
        mat(heads_kv * head_dim, embd, f"blk.{i}.attn_k.weight")
        mat(heads_kv * head_dim, embd, f"blk.{i}.attn_v.weight")
        mat(embd, heads * head_dim, f"blk.{i}.attn_output.weight")
        vec(head_dim, f"blk.{i}.attn_q_norm.weight")
        vec(head_dim, f"blk.{i}.attn_k_norm.weight")
        vec(embd, f"blk.{i}.ffn_norm.weight")
        mat(ff, embd, f"blk.{i}.ffn_gate.weight")
        mat(ff, embd, f"blk.{i}.ffn_up.weight")
        mat(embd, ff, f"blk.{i}.ffn_down.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"path": str(out), "bytes": out.stat().st_size, "arch": "qwen3", "n_vocab": N_VOCAB_FIXED,
            "n_vocab_fixed_by": "src/qwen3/qwen3_drafter_model.h (int n_vocab = 151936), never read from the file",
            "layers": layers, "embd": embd, "heads": heads, "heads_kv": heads_kv, "head_dim": head_dim, "ff": ff,
            "ctx": ctx, "seed": seed, "weights": "BF16 N(0, 0.02); norms F32 = 1", "tokenizer": "synthetic byte-level "
            "BPE: 256 byte tokens, ChatML specials, fillers, no merges"}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gguf-py", type=Path, default=None, help="the gguf-py folder to import (default: installed gguf)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=64)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.gguf_py:
        sys.path.insert(0, str(a.gguf_py))
    try:
        import yaml  # noqa: F401  # lazy: only to know whether the machine has PyYAML, 20 ms
    except ImportError:
        # gguf/metadata.py imports yaml at module level but only model-card reading calls it; the writer
        # never does. Without PyYAML (the GPU machine's Python may lack it; carry its wheel in .whl to avoid
        # this) a module that refuses any use stands in, and the JSON says so.
        import types  # lazy: only without PyYAML, 0 ms

        stub = types.ModuleType("yaml")

        def _refuse(*_a, **_k):
            raise RuntimeError("PyYAML is not installed: lucebox_tiny_model's stand-in refuses YAML")
        stub.safe_load = stub.load = stub.dump = stub.safe_dump = _refuse
        sys.modules["yaml"] = stub
        print("lucebox_tiny_model: PyYAML absent: a refusing stand-in for `yaml` (the writer never calls it)",
              file=sys.stderr)
    try:
        import gguf  # noqa: F401  # lazy: only to say what is missing, 150 ms
    except ImportError as exc:
        print(f"lucebox_tiny_model: cannot import gguf ({exc}): carry a PyYAML/numpy wheel or pass --gguf-py", file=sys.stderr)
        return 3
    t0 = time.monotonic()
    doc = write(a.out, layers=a.layers, embd=a.embd)
    doc["seconds"] = round(time.monotonic() - t0, 2)
    doc["yaml"] = "stand-in (PyYAML absent)" if getattr(sys.modules.get("yaml"), "safe_load", None) and \
        sys.modules["yaml"].__dict__.get("__file__") is None else "PyYAML"
    text = json.dumps(doc, indent=1)
    if a.json:
        a.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
