"""Model, data, generator and metric parts of the Carvana and ShuffleNet recipes (no trainer involved)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from recipes.carvana import (
    CarvanaDataset,
    UNet,
    dice_loss,
    dice_score,
    generate_synthetic_carvana,
    make_dice_metric,
    predict_masks,
    split_dataset,
)
from recipes.shufflenet import ShuffleNet, SyntheticShapes

H, W, N = 64, 96, 20


@pytest.fixture(scope="module")
def carvana_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_synthetic_carvana(tmp_path_factory.mktemp("carvana"), n_images=N, size=(H, W), seed=0)


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- UNet ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bilinear", [False, True])
@pytest.mark.parametrize("size", [(32, 48), (35, 51), (16, 16)])
def test_unet_output_matches_input_size(bilinear: bool, size: tuple[int, int]) -> None:
    model = UNet(n_channels=3, n_classes=2, bilinear=bilinear, base=4)
    assert model(torch.randn(2, 3, *size)).shape == (2, 2, *size)


def test_unet_default_width_matches_reference_parameter_count() -> None:
    # milesial/Pytorch-UNet reports 31.0M parameters (17.3M bilinear) for base=64.
    count = sum(p.numel() for p in UNet().parameters())
    assert count == 31_037_698


# --- synthetic generator ----------------------------------------------------------------------------


def test_generator_writes_carvana_layout(carvana_root: Path) -> None:
    images = sorted(p.stem for p in (carvana_root / "imgs").iterdir())
    masks = sorted(p.name for p in (carvana_root / "masks").iterdir())
    assert len(images) == N
    assert all(re.fullmatch(r"[0-9a-f]{12}_\d{2}", i) for i in images)
    assert masks == sorted(f"{i}_mask.gif" for i in images)
    assert all(p.suffix == ".jpg" for p in (carvana_root / "imgs").iterdir())
    with Image.open(carvana_root / "imgs" / f"{images[0]}.jpg") as img:
        assert (img.format, img.mode, img.size) == ("JPEG", "RGB", (W, H))
    with Image.open(carvana_root / "masks" / masks[0]) as mask:
        assert mask.format == "GIF"
        assert set(np.unique(np.asarray(mask.convert("L")))) == {0, 255}


def test_generator_is_deterministic(tmp_path: Path) -> None:
    a = generate_synthetic_carvana(tmp_path / "a", n_images=5, size=(H, W), seed=3)
    b = generate_synthetic_carvana(tmp_path / "b", n_images=5, size=(H, W), seed=3)
    c = generate_synthetic_carvana(tmp_path / "c", n_images=5, size=(H, W), seed=4)
    assert read_tree(a) == read_tree(b)
    assert read_tree(a).keys() != read_tree(c).keys()


def test_generator_is_idempotent_and_completes_partial_runs(tmp_path: Path) -> None:
    root = generate_synthetic_carvana(tmp_path, n_images=5, size=(H, W))
    before = read_tree(root)
    stamps = {p: p.stat().st_mtime_ns for p in root.rglob("*.*")}
    generate_synthetic_carvana(tmp_path, n_images=5, size=(H, W))
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*.*")} == stamps
    next(iter((root / "masks").iterdir())).unlink()
    generate_synthetic_carvana(tmp_path, n_images=5, size=(H, W))
    assert read_tree(root) == before


# --- dataset and split --------------------------------------------------------------------------------


def test_dataset_shapes_dtypes_and_classes(carvana_root: Path) -> None:
    ds = CarvanaDataset(carvana_root / "imgs", carvana_root / "masks")
    assert len(ds) == N
    assert ds.mask_values == [0, 255]
    item = ds[0]
    assert item["image"].shape == (3, H, W) and item["image"].dtype == torch.float32
    assert item["image"].min() >= 0.0 and item["image"].max() <= 1.0
    assert item["mask"].shape == (H, W) and item["mask"].dtype == torch.int64
    assert set(torch.cat([ds[i]["mask"].unique() for i in range(3)]).tolist()) == {0, 1}


def test_dataset_scale(carvana_root: Path) -> None:
    item = CarvanaDataset(carvana_root / "imgs", carvana_root / "masks", scale=0.5)[1]
    assert item["image"].shape == (3, H // 2, W // 2)
    assert item["mask"].shape == (H // 2, W // 2)
    assert set(item["mask"].unique().tolist()) == {0, 1}


def test_dataset_missing_mask_names_the_id(carvana_root: Path, tmp_path: Path) -> None:
    root = Path(shutil.copytree(carvana_root, tmp_path / "copy"))
    victim = sorted((root / "imgs").iterdir())[4].stem
    (root / "masks" / f"{victim}_mask.gif").unlink()
    with pytest.raises(FileNotFoundError, match=victim):
        CarvanaDataset(root / "imgs", root / "masks")


def test_dataset_empty_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    with pytest.raises(FileNotFoundError, match="No images"):
        CarvanaDataset(tmp_path / "imgs", tmp_path / "masks")


def test_split_is_deterministic(carvana_root: Path) -> None:
    ds = CarvanaDataset(carvana_root / "imgs", carvana_root / "masks")
    train, val = split_dataset(ds, val_percent=25, seed=0)
    assert (len(train), len(val)) == (15, 5)
    assert sorted([*train.indices, *val.indices]) == list(range(N))
    assert split_dataset(ds, val_percent=25, seed=0)[1].indices == val.indices
    assert split_dataset(ds, val_percent=25, seed=1)[1].indices != val.indices


# --- dice ---------------------------------------------------------------------------------------------


def test_dice_loss_is_zero_when_perfect_and_high_when_wrong() -> None:
    target = torch.randint(0, 2, (2, 8, 8))
    perfect = torch.nn.functional.one_hot(target, 2).permute(0, 3, 1, 2).float() * 40 - 20
    assert dice_loss(perfect, target, 2) < 1e-4
    assert dice_loss(-perfect, target, 2) > 0.99
    assert dice_loss(perfect[:, 1] - perfect[:, 0], target, 2, multiclass=False) < 1e-4
    assert dice_loss(torch.zeros(2, 2, 8, 8), target, 2) == pytest.approx(0.5, abs=0.05)


# Two 2x2 images. Foreground (class 1) counts, by hand:
#   A: |P|=2, |T|=1, |P&T|=1 -> 2*1 / (2+1) = 2/3
#   B: |P|=1, |T|=4, |P&T|=1 -> 2*1 / (1+4) = 2/5
# global (what we use): 2*(1+1) / (3+5) = 0.5;  per-image mean would be (2/3 + 2/5) / 2 = 0.5333
PRED = torch.tensor([[[1, 1], [0, 0]], [[1, 0], [0, 0]]])
TARGET = torch.tensor([[[1, 0], [0, 0]], [[1, 1], [1, 1]]])


def test_dice_score_matches_hand_computed_global_value() -> None:
    assert dice_score(PRED, TARGET, n_classes=2).item() == pytest.approx(0.5)


def test_dice_metric_accumulates_globally_across_updates() -> None:
    metric = make_dice_metric(2)
    metric.update(PRED[:1], TARGET[:1])
    metric.update(PRED[1:], TARGET[1:])
    assert metric.compute().item() == pytest.approx(0.5)
    metric.reset()
    metric.update(PRED, TARGET)
    with_bg = make_dice_metric(2, include_background=True)
    with_bg.update(PRED, TARGET)
    assert metric.compute().item() == pytest.approx(0.5)
    ours = dice_score(PRED, TARGET, 2, include_background=True)
    assert with_bg.compute().item() == pytest.approx(ours.item())


def test_predict_masks_writes_pngs_at_original_size(carvana_root: Path, tmp_path: Path) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    for p in sorted((carvana_root / "imgs").iterdir())[:2]:
        shutil.copy(p, images)
    model = UNet(base=4).train()
    written = predict_masks(model, images, tmp_path / "out", scale=0.5, device="cpu")
    assert model.training
    assert [p.name for p in written] == [f"{p.stem}_mask.png" for p in sorted(images.iterdir())]
    for path in written:
        with Image.open(path) as img:
            assert img.size == (W, H)
            assert set(np.unique(np.asarray(img))) <= {0, 255}


# --- ShuffleNet ---------------------------------------------------------------------------------------


def shuffle_order(channels: int, groups: int) -> list[int]:
    x = torch.arange(channels, dtype=torch.float32).view(1, channels, 1, 1)
    return torch.nn.ChannelShuffle(groups)(x).flatten().long().tolist()


def test_channel_shuffle_is_the_grid_transpose() -> None:
    assert shuffle_order(6, 2) == [0, 3, 1, 4, 2, 5]


@pytest.mark.parametrize(("channels", "groups"), [(6, 2), (6, 3), (12, 4), (24, 3)])
def test_channel_shuffle_is_a_bijection_undone_by_the_transpose(channels: int, groups: int) -> None:
    order = shuffle_order(channels, groups)
    assert sorted(order) == list(range(channels))
    x = torch.randn(2, channels, 3, 3)
    back = torch.nn.ChannelShuffle(channels // groups)(torch.nn.ChannelShuffle(groups)(x))
    assert torch.equal(back, x)


def tiny_shufflenet() -> ShuffleNet:
    return ShuffleNet(n_classes=4, groups=2, widths=(16, 32), depths=(1, 2), stem=8)


def test_shufflenet_forward_shape_and_width_checks() -> None:
    assert tiny_shufflenet()(torch.randn(3, 3, 32, 32)).shape == (3, 4)
    with pytest.raises(ValueError, match="divisible"):
        ShuffleNet(groups=3, widths=(64,), depths=(1,))


def test_synthetic_shapes_are_deterministic() -> None:
    ds = SyntheticShapes(n=8, size=32, n_classes=4, seed=0)
    x, y = ds[3]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and 0 <= int(y) < 4
    assert torch.equal(SyntheticShapes(n=8, size=32, n_classes=4, seed=0)[3][0], x)


def test_shufflenet_loss_decreases_on_synthetic_data() -> None:
    torch.manual_seed(0)
    ds = SyntheticShapes(n=32, size=16, n_classes=4, seed=0)
    x = torch.stack([ds[i][0] for i in range(len(ds))])
    y = torch.stack([ds[i][1] for i in range(len(ds))])
    model = tiny_shufflenet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(12):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_the_recipe_summary_names_only_what_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from recipes.unet_carvana import summarise

    def fake(dirpath: Path, last: str) -> Any:
        callback = SimpleNamespace(dirpath=dirpath, last_model_path=last)
        return SimpleNamespace(is_global_zero=True, callback_metrics={}, checkpoint_callback=callback, log_dir=tmp_path)

    summarise(fake(tmp_path / "missing", ""))
    assert "checkpoints" not in capsys.readouterr().out
    (tmp_path / "ckpts").mkdir()
    summarise(fake(tmp_path / "ckpts", ""))
    assert f"checkpoints     : {tmp_path / 'ckpts'}\n" in capsys.readouterr().out
    (tmp_path / "ckpts" / "last.ckpt").write_bytes(b"")
    summarise(fake(tmp_path / "ckpts", str(tmp_path / "ckpts" / "last.ckpt")))
    assert f"(last: {tmp_path / 'ckpts' / 'last.ckpt'})" in capsys.readouterr().out
