"""bf16 linear layers on weights packed once for oneDNN (packed_weights.py)."""

import copy

import pytest
import torch

from ray_dspine.engines.embedded.batch import forward_packed
from ray_dspine.engines.embedded.kv_cache import SlabCache
from ray_dspine.engines.embedded.packed_weights import PackedLinear, can_pack, pack_linears, unpacked_reason

pytestmark = pytest.mark.skipif(not can_pack(torch.bfloat16), reason=str(unpacked_reason()))


def _linear(weight, bias, dtype=torch.bfloat16) -> torch.nn.Linear:
    layer = torch.nn.Linear(len(weight[0]), len(weight), bias=bias is not None)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float32))
        if bias is not None:
            layer.bias.copy_(torch.tensor(bias, dtype=torch.float32))
    return layer.to(dtype)


def test_packed_linear_by_hand():
    # small integers are exact in bf16: W = [[1 2] [3 4] [5 6]], b = [1 0 -1]
    layer = PackedLinear(_linear([[1, 2], [3, 4], [5, 6]], [1, 0, -1]))
    x = torch.tensor([[1.0, 1.0], [2.0, 0.0]], dtype=torch.bfloat16)
    # row 1: (1+2+1, 3+4+0, 5+6-1); row 2: (2+1, 6+0, 10-1)
    assert layer(x).float().tolist() == [[4.0, 7.0, 10.0], [3.0, 6.0, 9.0]]
    assert layer(x.view(1, 2, 2)).shape == (1, 2, 3)  # (batch, rows, features) as nn.Linear takes them


def test_only_bf16_linears_are_packed():
    assert can_pack(torch.bfloat16) and not can_pack(torch.float32)
    model = torch.nn.Sequential(_linear([[1, 0]], None), torch.nn.ReLU(), _linear([[2]], [0.5], torch.float32))
    assert pack_linears(model) == 1
    assert isinstance(model[0], PackedLinear) and model[0].bias is None
    assert type(model[2]) is torch.nn.Linear  # fp32 stays as it is


def test_packed_outputs_equal_the_plain_layer_and_a_row_never_depends_on_the_others():
    torch.manual_seed(0)
    plain = torch.nn.Linear(64, 96).to(torch.bfloat16)
    packed = PackedLinear(plain)
    x = torch.randn(9, 64).to(torch.bfloat16)
    whole = packed(x)
    torch.testing.assert_close(whole, plain(x))
    for i in range(9):  # a verify block's row i is what row i alone gives
        assert torch.equal(whole[i : i + 1], packed(x[i : i + 1]))


def test_a_packed_tiny_llama_decodes_as_the_plain_one(tiny):
    plain, packed = (copy.deepcopy(tiny.model).to(torch.bfloat16) for _ in range(2))
    assert pack_linears(packed.model) == 2 * 7  # q k v o, gate up down, in each of 2 layers
    assert pack_linears(packed) == 1  # then the output projection
    feed = [[5, 17, 40, 3, 60, 22], [9, 9, 31]]
    with torch.inference_mode():
        caches = {name: [SlabCache(64), SlabCache(64)] for name in ("plain", "packed")}
        out = {
            name: forward_packed(model, caches[name], feed)
            for name, model in (("plain", plain), ("packed", packed))
        }
    for a, b in zip(out["plain"], out["packed"]):
        torch.testing.assert_close(a, b)
        assert torch.equal(a.argmax(-1), b.argmax(-1))
