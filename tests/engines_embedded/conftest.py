"""A tiny random-weight LlamaForCausalLM and a character tokenizer, for engine rule tests that need
real attention and a real KV cache but not the real model's seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ray_dspine.engines.embedded.model import LoadedModel


class CharTokenizer:
    """Printable ASCII: id = ord(c) - 32 (95 ids); id 95 is end of sequence."""

    eos_token_id = 95

    def encode(self, text, add_special_tokens=False):
        return [ord(c) - 32 for c in text if 32 <= ord(c) < 127]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i + 32) for i in ids if i < 95)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        text = "".join(f"{m['role']}: {m['content']}|" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")


def tiny_loaded(seed: int = 0) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    )
    model = LlamaForCausalLM(config).eval()
    return LoadedModel(model, CharTokenizer(), Path("tiny.gguf"), "0" * 64, frozenset({95}), 512)


@pytest.fixture(scope="module")
def tiny():
    return tiny_loaded()
