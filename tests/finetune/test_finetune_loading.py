"""load_pretrained on real files: wrapper prefixes, new heads, strict errors, value checks, suggestions."""

from __future__ import annotations

import pickle

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from torchwork.errors import CheckpointError
from torchwork.finetune import LoadReport, load_pretrained


class Net(nn.Module):
    def __init__(self, classes: int = 2) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.fc = nn.Linear(4, 8)
        self.head = nn.Linear(8, classes)

    def forward(self, x):
        return self.head(torch.relu(self.fc(self.body(x).mean(dim=(2, 3)))))


def trained_net(classes: int = 2) -> Net:
    torch.manual_seed(1)
    net = Net(classes)
    net.train()(torch.randn(4, 1, 6, 6))  # moves the BatchNorm running statistics off their defaults
    return net


def assert_same(model: nn.Module, reference: nn.Module, skip: tuple[str, ...] = ()) -> None:
    ref = reference.state_dict()
    for key, value in model.state_dict().items():
        if not key.startswith(skip):
            assert torch.equal(value, ref[key]), key


def test_a_ddp_wrapped_models_checkpoint_loads_into_a_plain_one(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    source = trained_net()
    # torch's own fake process group (its collectives do nothing): a real DDP wrapper and state_dict, and no
    # gloo transport, whose listening port stays open for the rest of the process once created
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    try:
        wrapped = DistributedDataParallel(source)
        torch.save(wrapped.state_dict(), tmp_path / "ddp.pt")
    finally:
        dist.destroy_process_group()
    assert next(iter(torch.load(tmp_path / "ddp.pt", weights_only=True))).startswith("module.")
    model = Net()
    report = load_pretrained(model, tmp_path / "ddp.pt")
    assert report.prefix == ("module.", "") and report.problems == 0
    assert len(report.loaded) == len(model.state_dict())
    assert_same(model, source)


def test_a_compiled_and_wrapped_models_safetensors_load_into_a_plain_one(tmp_path):
    source = trained_net()
    compiled = torch.compile(source)  # keys gain "_orig_mod."; compiling is lazy, nothing runs
    state = {f"module.{k}": v for k, v in compiled.state_dict().items()}  # nested: DDP around compile
    assert next(iter(state)).startswith("module._orig_mod.")
    save_file(state, str(tmp_path / "model.safetensors"))
    model = Net()
    report = load_pretrained(model, tmp_path)  # a folder holding model.safetensors
    assert report.prefix == ("module._orig_mod.", "") and report.problems == 0
    assert_same(model, source)
    # plain torch 2.13 strict=False load of the same keys loads nothing and says nothing
    result = Net().load_state_dict(compiled.state_dict(), strict=False)
    assert len(result.unexpected_keys) == len(state)


def test_a_plain_checkpoint_loads_into_a_wrapped_model():
    source = trained_net()

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = Net()

    model = Wrapper()
    report = load_pretrained(model, source.state_dict())
    assert report.prefix == ("", "backbone.")
    assert_same(model.backbone, source)


def test_a_2_class_head_into_a_3_class_model_loads_all_but_the_head_and_says_so():
    source = trained_net(classes=2)
    model = Net(classes=3)
    with pytest.raises(CheckpointError, match="mismatched") as error:
        load_pretrained(model, source.state_dict())
    assert "head.weight (2, 8) in the file, (3, 8) in the model" in str(error.value)
    report = load_pretrained(model, source.state_dict(), new=["head"])
    assert report.new == ["head.weight", "head.bias"] and report.problems == 0
    assert set(report.loaded) == set(model.state_dict()) - {"head.weight", "head.bias"}
    assert_same(model, source, skip=("head.",))
    text = str(report)
    assert "new: head.weight, head.bias" in text
    assert "head" in text.splitlines()[-2] or any(line.startswith("head ") for line in text.splitlines())
    # without new= and strict=False: the shapes that differ are never loaded, and reported
    fresh = Net(classes=3)
    before = fresh.head.weight.clone()
    loose = load_pretrained(fresh, source.state_dict(), strict=False)
    assert loose.mismatched == ["head.weight", "head.bias"] and torch.equal(fresh.head.weight, before)


def test_a_wrong_prefix_with_strict_raises_with_the_table_and_loads_nothing():
    source = trained_net()
    state = {f"encoder.{k}": v for k, v in source.state_dict().items()}
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as error:
        load_pretrained(model, state, strip_prefixes=False)
    message = str(error.value)
    assert "nothing was loaded" in message
    assert "module" in message and "loaded" in message and "missing" in message  # the table's header
    assert "unexpected: encoder.body.0.weight" in message
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    # the same file with the prefix found by matching
    assert load_pretrained(model, state).prefix == ("encoder.", "")


def test_an_init_hook_that_reinitialises_after_loading_is_caught():
    source = trained_net()
    model = Net()

    def reinit(module, incompatible):  # a buggy post-load hook that "initialises" the head again
        nn.init.zeros_(module.head.weight)

    model.register_load_state_dict_post_hook(reinit)
    with pytest.raises(CheckpointError, match=r"no longer hold the file's values \(e.g. \['head.weight'\]\)"):
        load_pretrained(model, source.state_dict())


def test_verify_catches_init_code_run_after_the_load():
    model = Net()
    report = load_pretrained(model, trained_net().state_dict())
    report.verify(model)  # untouched: fine
    model.fc.reset_parameters()
    with pytest.raises(CheckpointError, match="fc.weight"):
        report.verify(model)


def test_an_unmatched_key_gets_its_likely_counterpart_and_the_rule_works():
    source = trained_net()
    state = {k.replace("fc.", "proj."): v for k, v in source.state_dict().items()}
    with pytest.raises(CheckpointError) as error:
        load_pretrained(Net(), state)
    message = str(error.value)
    assert "fc.weight: likely 'proj.weight' (same shape (8, 4), same position)" in message
    assert "rename={'^proj\\\\.': 'fc.'}" in message
    report = load_pretrained(Net(), state, rename={r"^proj\.": "fc."})
    assert report.renames == [("proj.weight", "fc.weight"), ("proj.bias", "fc.bias")] and report.problems == 0


def test_rename_none_drops_keys_and_the_report_counts_them():
    state = dict(trained_net().state_dict())
    state["pooler.weight"] = torch.zeros(3)
    report = load_pretrained(Net(), state, rename={r"^pooler\.": None})
    assert report.dropped == ["pooler.weight"] and report.problems == 0
    assert "1 dropped by rename rules" in report.summary()


def test_a_pickle_that_is_not_plain_tensors_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as handle:
        pickle.dump({"weight": LoadReport}, handle)  # a class reference: never unpickled
    with pytest.raises(CheckpointError, match="weights_only=True"):
        load_pretrained(Net(), path)


def test_a_torchwork_checkpoint_and_bad_sources(tmp_path):
    source = trained_net()
    torch.save({"model": source.state_dict(), "optimizer": {}, "counters": {"global_step": 3}}, tmp_path / "c.pt")
    model = Net()
    assert load_pretrained(model, tmp_path / "c.pt").problems == 0
    assert_same(model, source)
    with pytest.raises(CheckpointError, match="no such file"):
        load_pretrained(Net(), tmp_path / "missing.safetensors")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no weights file"):
        load_pretrained(Net(), tmp_path / "empty")
    with pytest.raises(CheckpointError, match="not a valid regex"):
        load_pretrained(Net(), source.state_dict(), rename={"(": "x"})


# ---------------------------------------------------------------------------------------------- hostile files
def deep_model() -> nn.Module:
    return nn.Sequential(*[nn.Linear(4, 4) for _ in range(100)])  # 200 tensors


@pytest.mark.slow
def test_a_million_unmatched_keys_are_reported_in_bounded_time(within):
    shared = torch.zeros(4, 4)
    state = {f"stray.{i}.kernel": shared for i in range(1_000_000)}  # every one the shape of a missing key
    with within(60):
        report = load_pretrained(deep_model(), state, strict=False)
    assert len(report.unexpected) == 1_000_000 and len(report.missing) == 200 and report.loaded == []
    assert len(report.suggestions) == 50  # capped: the first 50 missing keys
    assert report.suggestions["0.weight"].startswith("'stray.0.kernel' (same shape (4, 4), same position)")
    with within(60):
        text = report.table()
    assert "... and 999992 more" in text


def test_an_absurdly_long_key_is_refused_at_once(within):
    model = deep_model()
    state = dict(model.state_dict())
    state["a." * 300_000 + "weight"] = torch.zeros(4, 4)  # a 600 KB key of 300,000 parts
    with within(10), pytest.raises(CheckpointError, match=r"key of 600006 characters .*longest a model key"):
        load_pretrained(deep_model(), state, strict=False)


@pytest.mark.parametrize("state, message", [
    ({1: 1, "weight": "x"}, r"holds no tensors \(keys: 'weight', 1\)"),  # int and str keys do not sort
    ({1: torch.zeros(2), "weight": torch.zeros(2, 2)}, "the key 1 is a int, not a string"),
])
def test_keys_of_mixed_types_are_one_clear_error(tmp_path, state, message):
    for source in (state, tmp_path / "mixed.pt"):
        torch.save(state, tmp_path / "mixed.pt")
        with pytest.raises(CheckpointError, match=message):
            load_pretrained(nn.Linear(2, 2), source)


@pytest.mark.parametrize(("bad", "what"), [(float("nan"), "NaN"), (float("inf"), "inf"), (-float("inf"), "inf")])
def test_non_finite_weights_are_refused_before_the_model_is_touched(bad, what):
    source = trained_net()
    state = dict(source.state_dict())
    state["fc.weight"] = state["fc.weight"].clone()
    state["fc.weight"][1, 2] = bad
    state["head.bias"] = torch.full_like(state["head.bias"], bad)
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"2 tensor\(s\) hold NaN or inf.*fc.weight \(1 {what} of 32\)"
                                              rf".*head.bias \(2 {what} of 2\).*allow_nonfinite=True"):
        load_pretrained(model, state)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    report = load_pretrained(model, state, allow_nonfinite=True)  # asked for: loaded, and said so
    assert report.problems == 0 and "fc.weight" in report.notes[0] and "NaN or inf" in report.notes[0]
    assert torch.equal(model.fc.weight.isnan() | model.fc.weight.isinf(), state["fc.weight"].isnan()
                       | state["fc.weight"].isinf())
    report.verify(model)


def test_complex_weights_are_refused_not_cut_to_their_real_part():
    source = trained_net()
    state = dict(source.state_dict())
    state["fc.weight"] = torch.complex(state["fc.weight"], torch.ones_like(state["fc.weight"]))
    model = Net()
    before = model.fc.weight.detach().clone()
    with pytest.raises(CheckpointError, match=r"fc.weight: complex64 in the file, float32 in the model"):
        load_pretrained(model, state)
    assert torch.equal(model.fc.weight, before)


# ---------------------------------------------------------------------------------------------- sharded folders
def _sharded(folder, state, shards=("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")):
    import json

    keys = list(state)
    half = len(keys) // 2
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: state[k].contiguous() for k in keys[:half]}, folder / shards[0])
    save_file({k: state[k].contiguous() for k in keys[half:]}, folder / shards[1])
    index = {"metadata": {}, "weight_map": {k: shards[0] if i < half else shards[1] for i, k in enumerate(keys)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder / "model.safetensors.index.json"


def test_a_sharded_hugging_face_folder_loads():
    import tempfile
    from pathlib import Path

    source = trained_net()
    folder = Path(tempfile.mkdtemp()) / "hf"
    _sharded(folder, dict(source.state_dict()))
    model = Net()
    assert load_pretrained(model, folder).problems == 0
    assert_same(model, source)


def _rewrite_index(index, change):
    import json

    data = json.loads(index.read_text())
    change(data)
    index.write_text(json.dumps(data))


def _point_first_at(target):
    return lambda data: data["weight_map"].update({next(iter(data["weight_map"])): str(target)})


@pytest.mark.parametrize(("case", "message"), [
    ("absolute", r"the shard '/.*outside/model.safetensors' is not a file name inside the folder"),
    ("dotdot", r"the shard '../outside/model.safetensors' is not a file name inside the folder"),
    ("symlink", r"the shard 'linked.safetensors' leads outside the folder"),
    ("fifo", r"the shard 'fifo.safetensors' is not a regular file \(a FIFO\)"),
    ("missing-shard", r"the shard 'gone.safetensors' is missing"),
    ("not-json", r"is not a readable shard index"),
    ("no-weight-map", r"has no 'weight_map'"),
    ("weight-map-list", r"has no 'weight_map'"),
    ("shard-number", r"has no 'weight_map'"),
    ("deep", r"is not a readable shard index"),
    ("lies", r"lists 1 tensor\(s\) its shards do not hold"),
    ("damaged-shard", r"not a readable safetensors file"),
])
def test_a_hostile_shard_index_is_refused_with_a_message(tmp_path, within, case, message):
    import os

    source = dict(trained_net().state_dict())
    index = _sharded(tmp_path / "hf", source)
    outside = tmp_path / "outside"
    outside.mkdir()
    save_file({k: v.contiguous() for k, v in source.items()}, outside / "model.safetensors")  # a loadable file
    changes = {
        "absolute": _point_first_at(outside / "model.safetensors"),
        "dotdot": _point_first_at("../outside/model.safetensors"),
        "symlink": _point_first_at("linked.safetensors"),
        "fifo": _point_first_at("fifo.safetensors"),
        "missing-shard": _point_first_at("gone.safetensors"),
        "no-weight-map": lambda data: data.pop("weight_map"),
        "weight-map-list": lambda data: data.update(weight_map=["a"]),
        "shard-number": lambda data: data["weight_map"].update({"fc.weight": 5}),
        "lies": lambda data: data["weight_map"].update({"extra.weight": next(iter(data["weight_map"].values()))}),
    }
    if case in changes:
        _rewrite_index(index, changes[case])
    os.symlink(outside / "model.safetensors", index.parent / "linked.safetensors")
    os.mkfifo(index.parent / "fifo.safetensors")
    if case == "not-json":
        index.write_text("{not json")
    if case == "deep":
        index.write_text("[" * 100_000 + "]" * 100_000)
    if case == "damaged-shard":
        (index.parent / "model-00001-of-00002.safetensors").write_bytes(b"\xff" * 64)
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with within(20), pytest.raises(CheckpointError, match=message):
        load_pretrained(model, index.parent)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
