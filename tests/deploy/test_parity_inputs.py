"""The parity pass's held-out rows in chunks of similar length: the order, the fallbacks, the joined outputs."""

from __future__ import annotations

import pytest
import torch

from torchwork.deploy.parity_inputs import length_ordered, run_ordered
from torchwork.deploy.runtime import run_in_chunks


def _ids(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """A tokenizer stand-in: one id per word, padded to the longest of ``texts``, and the lengths."""
    longest = max(len(t.split()) for t in texts)
    ids = [[1 + len(word) for word in t.split()] + [0] * (longest - len(t.split())) for t in texts]
    return torch.tensor(ids), torch.tensor([len(t.split()) for t in texts])


TEXTS = [" ".join(["word"] * (1 + (7 * i) % 30)) for i in range(70)]


def test_rows_are_ordered_by_their_preprocessed_size_and_each_chunk_padded_to_its_own_longest() -> None:
    ordered = length_ordered(TEXTS, _ids, None, size=16)
    assert ordered is not None and sorted(ordered.order) == list(range(70)) and ordered.count == 70
    lengths = [len(TEXTS[i].split()) for i in ordered.order]
    assert lengths == sorted(lengths)
    widths = [chunk[0].shape[1] for chunk in ordered.chunks]
    assert [chunk[0].shape[0] for chunk in ordered.chunks] == [16, 16, 16, 16, 6]
    assert widths == sorted(widths) and widths[0] < widths[-1] == 30
    padded = sum(chunk[0].numel() for chunk in ordered.chunks)
    assert padded < 0.7 * _ids(TEXTS)[0].numel()  # against one batch padded to the longest of all


@pytest.mark.parametrize("rows", [TEXTS[:16], ["same length"] * 40, torch.ones(40, 3)])
def test_one_chunk_rows_of_one_size_or_a_tensor_keep_one_padded_batch(rows) -> None:
    assert length_ordered(rows, _ids if not isinstance(rows, torch.Tensor) else lambda r: r, None, size=16) is None


def test_outputs_come_back_joined_in_the_chunks_order() -> None:
    ordered = length_ordered(TEXTS, _ids, None, size=16)

    def sums(inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:  # a padding-blind "model"
        ids, lengths = inputs
        return [torch.stack([ids.sum(dim=1).float(), lengths.float()], dim=1)]

    joined = run_ordered(sums, ordered, lambda run, chunk: run_in_chunks(run, chunk))
    whole = sums(_ids(TEXTS))[0][torch.as_tensor(ordered.order)]
    torch.testing.assert_close(joined[0], whole)


def test_outputs_shaped_by_the_padding_are_refused_so_the_caller_goes_back_to_one_batch() -> None:
    ordered = length_ordered(TEXTS, _ids, None, size=16)
    with pytest.raises(ValueError, match="follows the padding"):
        run_ordered(lambda inputs: [inputs[0].float()], ordered, lambda run, chunk: run_in_chunks(run, chunk))
