"""Static INT8 activation scales (torchwork.deploy.static_scales): a row's INT8 answer depends on that row
alone, not on the rows batched with it nor on the batch's padded length; dynamic scales do not hold this."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from test_deploy_fusion import VOCAB, TinyBert

from torchwork.deploy import export
from torchwork.deploy.quantize import quantize_onnx
from torchwork.deploy.runtime import onnx_session, softmax
from torchwork.deploy.static_scales import range_scale
from torchwork.errors import ConfigError

ROWS = 12


def _rows(count: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 20, (count,), generator=generator).tolist()
    return [torch.randint(1, VOCAB, (n,), generator=generator).tolist() for n in lengths]


def _feeds(rows: list[list[int]], length: int | None = None) -> dict[str, np.ndarray]:
    width = length or max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for index, row in enumerate(rows):
        ids[index, : len(row)], mask[index, : len(row)] = row, 1
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    out = tmp_path_factory.mktemp("static") / "artifact"
    export(TinyBert().eval(), tuple(torch.from_numpy(v) for v in _feeds(_rows(4, 0)).values()), out,
           formats=("onnx",), input_names=("input_ids", "attention_mask"))
    calibration = [_feeds(_rows(32, seed)) for seed in (10, 11, 12)]
    check = [_feeds(_rows(5, 20)), _feeds(_rows(3, 21), 30)]
    made = {}
    for activations in ("static", "dynamic"):
        target = out.parent / f"{activations}.onnx"
        info = quantize_onnx(out / "model.onnx", target, per_channel=True, calibration=calibration,
                             attention_mask="attention_mask", check_feeds=check, activations=activations)
        made[activations] = (onnx_session(target, threads=1), info, target)
    return made


def _answers(session, feeds) -> np.ndarray:
    return softmax(session.run(None, feeds)[0])


def _alone_batched_padded(session) -> tuple[np.ndarray, list[np.ndarray]]:
    rows = _rows(ROWS, 1)
    alone = np.concatenate([_answers(session, _feeds([row])) for row in rows])
    others = []
    rng = np.random.default_rng(0)
    for index, row in enumerate(rows):  # each row in a batch of 31 with random neighbours, at a random place
        neighbours = _rows(30, 100 + index)
        place = int(rng.integers(0, 31))
        batch = neighbours[:place] + [row] + neighbours[place:]
        others.append(_answers(session, _feeds(batch))[place][None])
    batched = np.concatenate(others)
    padded = [_answers(session, _feeds(rows, length)) for length in (24, 40, 63)]  # the rows padded further
    return alone, [batched, *padded]


def test_static_int8_answers_depend_on_the_request_alone(graphs):
    session, info, target = graphs["static"]
    assert info["activations"] == "static" and info["static_scales"] > 0
    ops = {node.op_type for node in onnx.load(str(target)).graph.node}
    assert "DynamicQuantizeLinear" not in ops and "QAttention" in ops
    alone, others = _alone_batched_padded(session)
    for other in others:
        assert (other.argmax(1) == alone.argmax(1)).all()
        np.testing.assert_allclose(other, alone, atol=1e-6, rtol=0)


def test_dynamic_int8_answers_move_with_their_neighbours(graphs):
    """What the static scales fix: the same rows, dynamic scales, move by more than 1e-6."""
    session, info, _ = graphs["dynamic"]
    alone, others = _alone_batched_padded(session)
    assert max(float(np.abs(other - alone).max()) for other in others) > 1e-6


def test_static_int8_stays_close_to_float(graphs, tmp_path):
    session, _, _ = graphs["static"]
    rows = _rows(64, 5)
    float_session = onnx_session(graphs["static"][2].parent / "artifact" / "model.onnx", threads=1)
    exact = _answers(float_session, _feeds(rows))
    static = _answers(session, _feeds(rows))
    assert np.abs(static - exact).max() < 0.05


def test_static_scales_need_calibration_and_a_known_setting(tmp_path):
    with pytest.raises(ConfigError, match="quantize_activations='sometimes'"):
        export(torch.nn.Linear(3, 2), torch.randn(2, 3), tmp_path / "a", formats=("onnx",), quantize="int8",
               quantize_activations="sometimes")
    with pytest.raises(ConfigError, match="calibration="):
        export(torch.nn.Linear(3, 2), torch.randn(2, 3), tmp_path / "b", formats=("onnx",), quantize="int8",
               quantize_activations="static")
    assert range_scale(0.0, 0.0) == (1.0, 0) and range_scale(-2.0, -1.0) == (2.0 / 255, 255)
