"""A bf16 model's linear layers with their weights laid out once, at load, for oneDNN's kernels.

Rule. For every `nn.Linear` of a bf16 model (the output projection included), the weight is reordered
once into oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`) and the layer becomes a
`PackedLinear` that calls oneDNN's linear on it (`torch.ops.mkldnn._linear_pointwise`). The plain
path hands the kernel torch's row-major weight on every call; packed, it reads its own layout.
What stays: the values. The outputs equal the plain layer's up to bf16 rounding (the tests compare
them; bit for bit on the machine of the figures below), and a row's output does not depend on the
other rows fed with it (a test), so a verify block's rows are what its tokens give one at a time.
When: only for bf16, and only where oneDNN has bf16 kernels for this CPU (`torch.backends.mkldnn.is_available()`
and `torch.ops.mkldnn._is_mkldnn_bf16_supported()`: AVX-512 BW/VL/DQ, AVX-NE-CONVERT or AMX; on an AVX2-only
CPU oneDNN refuses the reorder, and the layers stay plain, `unpacked_reason` says why);
fp32 layers stay as they are (their path is MKL's, whose rows are what greedy identity rests on).
On the engine's CPU model in bf16, behind 600 cached tokens, a one-token step took 36.8 ms with the
plain layers and 28.9 ms packed, four requests' 9-token verify blocks packed into one forward 70.3 ms
and 58.4 ms (MEASURED side by side, docs/results/embedded-engine.md).
Memory: a packed weight replaces the layer's own (same bytes); a tied output projection keeps the
embedding table and adds its packed copy.
Rows apart (`rows_apart`, checked at load under config `row_exact`): for every shape of packed layer
in the model, m rows of seeded random input fed together give each row the bits it gets fed alone, for
every m from 2 to the rows asked for. On the machine of the figures this holds up to 32 rows and not
at 33 (oneDNN's row block there; MEASURED, docs/results/embedded-engine.md).
"""

from __future__ import annotations

import torch


def unpacked_reason() -> str | None:
    """None where oneDNN can pack bf16 linear weights on this CPU (rule `When`); else why it cannot."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return "this torch has no oneDNN"
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return (f"oneDNN has no bf16 kernels for this CPU (torch sees {torch.backends.cpu.get_cpu_capability()}; "
                "they need AVX-512 BW/VL/DQ, AVX-NE-CONVERT or AMX)")
    return None


def can_pack(dtype: torch.dtype) -> bool:
    return dtype == torch.bfloat16 and unpacked_reason() is None


class PackedLinear(torch.nn.Module):
    """`nn.Linear`'s forward on a weight packed once (rule above)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        with torch.no_grad():
            self.register_buffer("packed_weight", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach()))
            self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linears(model: torch.nn.Module) -> int:
    """Replace every bf16 `nn.Linear` under `model` by a `PackedLinear` (rule above); returns how many."""
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear and can_pack(module.weight.dtype)
    ]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, PackedLinear(module))
    return len(targets)


def rows_apart(model: torch.nn.Module, rows: int) -> str | None:
    """None when every packed layer shape keeps rows apart up to `rows` rows (rule above); else which layer and
    row count does not."""
    seen: set[tuple[int, int]] = set()
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for name, module in model.named_modules():
            if not isinstance(module, PackedLinear) or (module.in_features, module.out_features) in seen:
                continue
            seen.add((module.in_features, module.out_features))
            x = torch.randn(rows, module.in_features, generator=generator).to(torch.bfloat16)
            alone = torch.cat([module(x[i : i + 1]) for i in range(rows)])
            for m in range(2, rows + 1):
                if not torch.equal(module(x[:m]), alone[:m]):
                    return f"{name} gives rows fed {m} at a time other bits than fed alone"
    return None
