"""Writes a tiny random-weight Llama GGUF model for llama.cpp's server, with a word-piece SPM vocabulary built from
loadrepro's own record pool, so prompts tokenize to a few characters per token as with a real model.

    python scripts/engines/make_tiny_gguf.py OUT.gguf [--size tiny|26m]

Outputs never contain byte, control or end-of-sequence tokens (their output rows are zero while the rest are
large and random), so text stays valid UTF-8 and every request runs to max_tokens.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

import gguf
import numpy as np

from loadrepro.workload.corpus import record_pool

SIZES = {  # embedding, blocks, feed-forward, heads, KV heads
    "tiny": (64, 2, 128, 2, 1),
    "26m": (512, 8, 1536, 8, 4),
}
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
WORDS = 6000


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL,
             gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    counts = collections.Counter(re.findall(r"[A-Za-z]+|\d|[^\sA-Za-z\d]", " ".join(record_pool(7).texts)))
    pieces: set[str] = {"\u2581"} | {chr(c) for c in range(33, 127)} | {"\u2581" + chr(c) for c in range(33, 127)}
    for word, _ in counts.most_common(WORDS):
        for piece in (word, "\u2581" + word):
            pieces.update(piece[:i] for i in range(1, len(piece) + 1))  # every prefix, so whole words merge
    ordered = sorted(pieces, key=lambda p: (len(p), p))
    tokens += ordered
    types += [gguf.TokenType.NORMAL] * len(ordered)
    scores = [0.0] * (len(tokens) - len(ordered)) + [float(len(p)) for p in ordered]  # longer pieces win
    return tokens, scores, [int(t) for t in types]


def write(path: Path, size: str, seed: int = 0) -> None:
    embd, blocks, ff, heads, kv_heads = SIZES[size]
    head_dim = embd // heads
    tokens, scores, types = vocabulary()
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(f"loadrepro-{size}")
    writer.add_context_length(32768)
    writer.add_embedding_length(embd)
    writer.add_block_count(blocks)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHATML)

    def weights(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    vocab = len(tokens)
    output = weights(vocab, embd, scale=1.0)
    output[:261] = 0.0  # never write control, end-of-sequence or byte tokens
    writer.add_tensor("token_embd.weight", weights(vocab, embd, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for i in range(blocks):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weights(embd, embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weights(kv_heads * head_dim, embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weights(kv_heads * head_dim, embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weights(embd, embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(ff, embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(ff, embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(embd, ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write(args.out, args.size)
    print(args.out)


if __name__ == "__main__":
    main()
