"""doctor/tensor_values.py: what the doctor reads of a forward's output without changing it: the first tensor,
the tensors nested one or two levels deep (bounded), and finiteness by one reduction that an overflowing sum
does not fool."""

from __future__ import annotations

import torch

from torchwork.doctor.tensor_values import first_tensor, is_finite_fast, tensors_in


def test_first_tensor_is_the_output_or_the_head_of_a_tuple_and_none_otherwise() -> None:
    logits, aux = torch.ones(2), torch.zeros(1)
    assert first_tensor(logits) is logits
    assert first_tensor((logits, aux)) is logits and first_tensor([aux, logits]) is aux
    assert first_tensor({"logits": logits}) is None and first_tensor(("loss", logits)) is None and first_tensor(()) is None


def test_tensors_in_reads_two_levels_of_tuples_lists_and_dicts_no_deeper_and_at_most_limit() -> None:
    a, b, c, deep = torch.ones(1), torch.ones(2), torch.ones(3), torch.ones(4)
    found = tensors_in((a, {"aux": b, "more": [c, [deep]]}, "text"))
    assert [t.numel() for t in found] == [1, 2]  # c and deep are three and four levels down
    assert [t.numel() for t in tensors_in([a, [b, c]])] == [1, 2, 3]
    assert len(tensors_in([torch.ones(1)] * 40)) == 16 and len(tensors_in([torch.ones(1)] * 40, limit=3)) == 3


def test_is_finite_fast_sees_nan_and_inf_and_is_not_fooled_by_a_sum_that_overflows() -> None:
    assert is_finite_fast(torch.tensor([1.0, 2.0]))
    assert not is_finite_fast(torch.tensor([1.0, float("nan")]))
    assert not is_finite_fast(torch.tensor([float("-inf"), 0.0]))
    big = torch.full((4,), torch.finfo(torch.float16).max, dtype=torch.float16)  # the sum overflows; no element does
    assert is_finite_fast(big)
    assert is_finite_fast(torch.empty(0)) and is_finite_fast(torch.empty(3, device="meta"))
    assert is_finite_fast(torch.arange(5))  # integers are always finite
