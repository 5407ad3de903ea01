"""Writes a tiny random-weight Hugging Face Llama for vLLM's CPU build, with a byte-level BPE tokenizer trained
here on the given corpus and a simple chat template. Runs in vLLM's environment (torch, transformers, tokenizers).

    python make_tiny_hf.py OUT_DIR --corpus CORPUS.txt

Head size 32 (supported by vLLM's CPU attention), 2 layers, 2 heads, 1 KV head, 32,768 positions. The output
layer is scaled up (x LOGIT_SCALE) so that greedy choices are confident, as a trained model's mostly are: random
weights alone leave every position a near-tie, and a check of answers under load would then mean nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
LOGIT_SCALE = 100.0  # logits' spread from about 0.16 to about 16: the top token mostly leads by nats
TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--vocab", type=int, default=2000)
    args = parser.parse_args()
    torch.manual_seed(0)
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train([str(args.corpus)], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = TEMPLATE
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=32768,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(LOGIT_SCALE)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
