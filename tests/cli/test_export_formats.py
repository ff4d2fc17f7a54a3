"""`dpemb export --format onnx|torchscript` (run in onnxruntime / torch.jit.load against
`dpemb embed`), the model card's input, evaluation and use sections, and `dpemb embed
--split` / `--skip-bad`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from dpemb.cli.main import main as dpemb
from dpemb.data.dataset import UserDataset
from dpemb.data.images import decode_image
from dpemb.data.tensors import to_float_tensor
from dpemb.models import BACKBONES, build_backbone
from dpemb.models.export import MAX_ABS_DIFFERENCE, run_onnx, run_torchscript
from dpemb.training.artifact import make_card, write_artifact, write_export
from tests.conftest import make_tiny_dataset

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A dataset, a short centralized run on it, and a folder of its images as PNG files."""
    d = tmp_path_factory.mktemp("export")
    ds = make_tiny_dataset(num_users=16)
    ds.save(d / "data")
    assert dpemb(["train", "--data", str(d / "data"), "--out", str(d / "run"), "--algorithm", "centralized",
                  "--steps", "3", "--batch-size", "16", "--eval-every", "3", "--embedding-dim", "16",
                  "--no-progress"]) == 0
    (d / "png").mkdir()
    for i in range(5):
        Image.fromarray(np.asarray(ds.images[i])[:, :, 0]).save(d / "png" / f"img{i}.png")
    return d


def _png_folder(tmp_path, channels: int, size: int, n: int = 4):
    rng = np.random.default_rng(0)
    folder = tmp_path / "png"
    folder.mkdir()
    for i in range(n):
        shape = (size + 6, size) if channels == 1 else (size + 6, size, 3)  # not square: the crop rule too
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(folder / f"i{i}.png")
    return folder


def _decoded(files, size, channels):
    return to_float_tensor(np.stack([decode_image(f, image_size=size, channels=channels) for f in files]))


# mobilenetv2-bn exports the same layers as mobilenetv2-gn but BatchNorm (about 15 s on 2 cores): slow
@pytest.mark.parametrize("name", [pytest.param(b, marks=pytest.mark.slow) if b == "mobilenetv2-bn" else b
                                  for b in BACKBONES])
def test_every_backbone_exports_to_what_embed_computes(name, tmp_path, capsys):
    """A small random model of each backbone: its ONNX file in onnxruntime and its
    TorchScript file in torch.jit.load give `dpemb embed`'s embeddings of the same image
    files, within MAX_ABS_DIFFERENCE (measured here: < 2e-6)."""
    channels, size = (3, 32) if name == "resnet-gn" else (1, 28)
    torch.manual_seed(0)
    model = build_backbone(name, in_channels=channels, image_size=size, embedding_dim=8, width=0.25)
    kwargs = dict(in_channels=channels, image_size=size, embedding_dim=8, width=0.25, groups=None)
    card = make_card(backbone_name=name, backbone_kwargs=kwargs, embedding_dim=8, trainable="all",
                     algorithm="centralized", progress={"steps": 0}, provenance={}, privacy="not private")
    write_artifact(tmp_path / "art", model, card)
    folder = _png_folder(tmp_path, channels, size)
    assert dpemb(["embed", str(tmp_path / "art"), str(folder), "--out", str(tmp_path / "e.npy"),
                  "--device", "cpu"]) == 0
    want = np.load(tmp_path / "e.npy")
    files = (tmp_path / "e.txt").read_text().splitlines()
    x = _decoded(files, size, channels)
    for fmt, run in (("onnx", run_onnx), ("torchscript", run_torchscript)):
        written = write_export(tmp_path / fmt, model, card, fmt)
        assert written.max_difference is not None and written.max_difference <= MAX_ABS_DIFFERENCE
        assert json.loads((tmp_path / fmt / "model_card.json").read_text()) == card
        got = run(written.path, x)
        assert got.shape == want.shape == (4, 8)
        assert np.abs(got - want).max() < MAX_ABS_DIFFERENCE, (fmt, np.abs(got - want).max())
        big = run(written.path, torch.cat([x, x, x]))  # the batch axis is dynamic
        assert np.abs(big[8:] - want).max() < MAX_ABS_DIFFERENCE


def test_scripted_backbone_refuses_bad_input_like_the_python_one():
    """The input check that stopped torch.jit.script now compiles, with the same messages."""
    for name in BACKBONES:
        model = build_backbone(name, in_channels=1, image_size=28, width=0.25)
        scripted = torch.jit.script(model.eval())
        for bad in (torch.rand(2, 3, 28, 28), torch.zeros(2, 1, 28, 28, dtype=torch.uint8), torch.rand(2, 28, 28)):
            with pytest.raises(ValueError) as py:
                model(bad)
            with pytest.raises(Exception) as js:  # TorchScript re-raises as torch.jit.Error
                scripted(bad)
            assert str(py.value).replace("dtype torch.uint8", "an integer dtype") in str(js.value)
        assert "got 3 channels (input shape (2, 3, 28, 28))" in _message(model, torch.rand(2, 3, 28, 28))
        x = torch.rand(3, 1, 28, 28)
        assert torch.equal(scripted(x), model(x))
    lenet = build_backbone("lenet", in_channels=1, image_size=28)
    assert "28x28" in _message(lenet, torch.rand(1, 1, 32, 32))
    with pytest.raises(Exception, match="28x28"):
        torch.jit.script(lenet)(torch.rand(1, 1, 32, 32))


def _message(model, x) -> str:
    with pytest.raises(ValueError) as e:
        model(x)
    return str(e.value)


def test_export_cli_writes_onnx_and_torchscript_beside_the_card(work, tmp_path, capsys):
    assert dpemb(["embed", str(work / "run"), str(work / "png"), "--out", str(tmp_path / "e.npy"),
                  "--device", "cpu"]) == 0
    want = np.load(tmp_path / "e.npy")
    x = _decoded((tmp_path / "e.txt").read_text().splitlines(), 28, 1)
    run_card = json.loads((work / "run" / "model_card.json").read_text())
    for fmt, file, run in (("onnx", "model.onnx", run_onnx), ("torchscript", "model.torchscript.pt", run_torchscript)):
        capsys.readouterr()
        assert dpemb(["export", str(work / "run"), "--out", str(tmp_path / fmt), "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert f"wrote {tmp_path / fmt / file}" in out and "max |difference| = " in out
        assert float(out.split("max |difference| = ")[1].split()[0]) <= MAX_ABS_DIFFERENCE
        assert sorted(p.name for p in (tmp_path / fmt).iterdir()) == sorted([file, "model_card.json"])
        assert json.loads((tmp_path / fmt / "model_card.json").read_text()) == run_card
        assert np.abs(run(tmp_path / fmt / file, x) - want).max() < MAX_ABS_DIFFERENCE


def test_card_states_input_evaluation_and_use(work):
    card = json.loads((work / "run" / "model_card.json").read_text())
    report = json.loads((work / "run" / "report.json").read_text())
    assert card["input"]["image_size"] == 28 and card["input"]["channels"] == 1
    assert card["input"]["tensor"] == "float32 (N, 1, 28, 28), NCHW"
    assert "/ 255" in card["input"]["value_range"] and "[-1, 1]" in card["input"]["normalisation"]
    assert "centre square" in card["input"]["decode"]
    ev = card["evaluation"]
    assert ev["split"] == report["eval_split"] == "test" and ev["steps"] == card["steps"] == 3
    assert ev["metrics"]["recall_at_far_0.001"] == report["final"]["recall_at_far_0.001"]
    assert set(ev["metrics"]) == {k for k in report["final"] if k.startswith(("recall", "roc", "prec", "map"))}
    assert ev["positive_pairs"] == report["final"]["eval_positive_pairs"] > 0
    assert ev["unsupported_fars"] == report["final"]["unsupported_fars"]  # rates the pairs cannot support
    assert "verification" in card["intended_use"]
    assert any("not evaluated on other domains" in x for x in card["limitations"])
    assert any("privacy statements cover" in x for x in card["limitations"])
    mobilenet = make_card(backbone_name="mobilenetv2-gn",
                          backbone_kwargs=dict(in_channels=3, image_size=64), embedding_dim=8, trainable="all",
                          algorithm="centralized", progress={"steps": 0}, provenance={}, privacy="not private")
    assert "ImageNet mean (0.485, 0.456, 0.406)" in mobilenet["input"]["normalisation"]
    assert "evaluation" not in mobilenet  # no run, no metrics


def test_embed_split(work, tmp_path):
    assert dpemb(["embed", str(work / "run"), str(work / "data"), "--out", str(tmp_path / "all.npy"),
                  "--device", "cpu"]) == 0
    assert dpemb(["embed", str(work / "run"), str(work / "data"), "--out", str(tmp_path / "test.npy"),
                  "--device", "cpu", "--split", "test"]) == 0
    ds = UserDataset.load(work / "data")
    mask = ds.split().mask("test")
    full, part = np.load(tmp_path / "all.npy"), np.load(tmp_path / "test.npy")
    assert 0 < len(part) == mask.sum() < len(full)
    assert np.allclose(part, full[mask], atol=1e-6)
    names = (tmp_path / "test.txt").read_text().splitlines()
    assert names == [n for n, m in zip((tmp_path / "all.txt").read_text().splitlines(), mask) if m]


def test_embed_split_refuses_image_files(work, tmp_path, capsys):
    assert dpemb(["embed", str(work / "run"), str(work / "png"), "--out", str(tmp_path / "e.npy"),
                  "--split", "test"]) == 1
    assert "--split is for a dataset directory" in capsys.readouterr().err


def test_a_corrupt_file_is_named_then_skipped_with_skip_bad(work, tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for p in (work / "png").iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    (folder / "img2.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")  # corrupt, in the middle
    args = ["embed", str(work / "run"), str(folder), "--out", str(tmp_path / "e.npy"), "--device", "cpu",
            "--batch-size", "2"]
    assert dpemb(args) == 1
    err = capsys.readouterr().err
    assert str(folder / "img2.png") in err and "--skip-bad" in err
    assert not (tmp_path / "e.npy").exists()

    assert dpemb(args + ["--skip-bad"]) == 0  # the error's advice
    cap = capsys.readouterr()
    assert f"skipped 1 of 5 image files that could not be decoded: {folder / 'img2.png'}" in cap.out
    assert str(folder / "img2.png") in cap.err
    names = (tmp_path / "e.txt").read_text().splitlines()
    assert names == [str(folder / f"img{i}.png") for i in (0, 1, 3, 4)]
    assert dpemb(["embed", str(work / "run"), str(work / "png"), "--out", str(tmp_path / "all.npy"),
                  "--device", "cpu"]) == 0
    assert np.allclose(np.load(tmp_path / "e.npy"), np.load(tmp_path / "all.npy")[[0, 1, 3, 4]], atol=1e-6)


def test_an_export_that_disagrees_with_embed_is_refused_and_not_written(tmp_path, monkeypatch):
    """The check is live: a runtime that returns other numbers makes the export an error,
    with no model file and no card left behind."""
    from dpemb.models import export as ex
    from dpemb.training.artifact import ArtifactError

    model = build_backbone("lenet", in_channels=1, image_size=28, embedding_dim=8, width=0.25)
    card = make_card(backbone_name="lenet", backbone_kwargs=dict(in_channels=1, image_size=28), embedding_dim=8,
                     trainable="all", algorithm="centralized", progress={"steps": 0}, provenance={},
                     privacy="not private")
    monkeypatch.setattr(ex, "run_torchscript", lambda path, images: run_torchscript(path, images) + 1e-3)
    with pytest.raises(ArtifactError, match="differs from dpemb embed by 1.00e-03"):
        write_export(tmp_path, model, card, "torchscript")
    assert list(tmp_path.iterdir()) == []
