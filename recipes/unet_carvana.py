"""UNet segmentation on Carvana, or on a synthetic set in the same layout: the flagship job.

    python recipes/unet_carvana.py fit --config recipes/unet_carvana.yaml
    python recipes/unet_carvana.py fit --config recipes/unet_carvana.yaml --trainer.strategy ddp --trainer.devices 2
    python recipes/unet_carvana.py fit --config recipes/unet_carvana.yaml --ckpt_path last        # resume
    python recipes/unet_carvana.py fit --data.root /data/carvana --data.generate false          # real data
    python recipes/unet_carvana.py predict --ckpt_path runs/unet/lightning_logs/version_0/checkpoints/last.ckpt \\
        --data.predict_dir /data/carvana/imgs --model.predict_out_dir masks/

Real Carvana keeps ``imgs/<id>.jpg`` and ``masks/<id>_mask.gif``; the generator writes that
layout, so the same loader reads both.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

if __package__ in (None, ""):  # run as a script: make `recipes` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trainer
from recipes.carvana import (
    CarvanaDataset,
    UNet,
    dice_loss,
    generate_synthetic_carvana,
    make_dice_metric,
    split_dataset,
)
from recipes.carvana.data import IMAGE_SUFFIXES, files_by_stem, load_image
from recipes.carvana.samples import save_sample_grid


class UNetSegmentation(trainer.Module):
    """UNet trained with cross-entropy + dice loss; validation dice is a global torchmetrics score."""

    def __init__(
        self,
        n_channels: int = 3,
        n_classes: int = 2,
        bilinear: bool = False,
        base: int = 8,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        init_weights: str | None = None,
        n_sample_images: int = 4,
        histogram_every_n_steps: int = 0,
        predict_out_dir: str = "predictions",
    ) -> None:
        """
        Args:
            n_channels: input channels (3 for RGB).
            n_classes: output classes (2: background and car).
            bilinear: bilinear upsampling instead of transposed convolutions.
            base: width of the first UNet stage (64 in the paper; 8 trains on a CPU in minutes).
            lr: AdamW learning rate (cosine-annealed to 0 over max_epochs).
            weight_decay: AdamW weight decay.
            init_weights: a checkpoint or bare state_dict to start from (``module.`` prefixes are stripped).
            n_sample_images: validation images saved with true and predicted masks each epoch.
            histogram_every_n_steps: log weight and gradient histograms every n steps (0: never).
            predict_out_dir: where ``predict`` writes ``<id>_mask.png`` files.
        """
        super().__init__()
        self.model = UNet(n_channels, n_classes, bilinear=bilinear, base=base)
        self.n_classes = n_classes
        self.lr = lr
        self.weight_decay = weight_decay
        self.n_sample_images = n_sample_images
        self.histogram_every_n_steps = histogram_every_n_steps
        self.predict_out_dir = Path(predict_out_dir)
        self.val_dice = make_dice_metric(n_classes)
        self._samples: tuple[torch.Tensor, ...] | None = None
        if init_weights:
            from trainer.checkpoint import extract_state_dict, load_checkpoint, load_weights

            # This recipe's own checkpoints name the UNet's weights ``model.*``; a bare UNet state_dict does not.
            keys = extract_state_dict(load_checkpoint(init_weights))
            own = any(k.removeprefix("module.").startswith("model.") for k in keys)
            load_weights(self if own else self.model, init_weights)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)

    def _loss(self, logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, masks) + dice_loss(logits.float(), masks, self.n_classes)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(self(batch["image"]), batch["mask"])
        self.log("train_loss", loss, prog_bar=True)
        self.log("lr", self.trainer.optimizers[0].param_groups[0]["lr"])
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self(batch["image"])
        self.log("val_loss", self._loss(logits, batch["mask"]), sync_dist=True)
        predictions = logits.argmax(dim=1)
        self.val_dice.update(predictions, batch["mask"])
        self.log("val_dice", self.val_dice, prog_bar=True)
        if batch_idx == 0 and self.global_rank == 0:
            n = self.n_sample_images
            self._samples = (batch["image"][:n].cpu(), batch["mask"][:n].cpu(), predictions[:n].cpu())

    def on_validation_epoch_end(self) -> None:
        if self._samples is None or self.trainer.sanity_checking or not self.trainer.is_global_zero:
            return
        images, masks, predictions = self._samples
        path = (
            Path(self.trainer.log_dir) / "samples" / f"epoch{self.current_epoch:03d}-step{self.global_step:06d}.png"
        )  # several validations per epoch
        save_sample_grid(path, images, masks, predictions)
        for logger in self.trainer.loggers:
            logger.log_image(
                "val/samples",
                [img for img in images],
                self.global_step,
                masks=[{"ground_truth": m.numpy(), "prediction": p.numpy()} for m, p in zip(masks, predictions)],
            )
        self._samples = None

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Weight and gradient histograms for loggers that draw them (wandb, TensorBoard)."""
        every = self.histogram_every_n_steps
        if not every or (self.global_step + 1) % every or not self.trainer.is_global_zero:
            return
        for logger in self.trainer.loggers:
            for name, param in self.model.named_parameters():
                logger.log_histogram(f"weights/{name}", param.detach().cpu(), self.global_step)
                if param.grad is not None:
                    logger.log_histogram(f"grads/{name}", param.grad.detach().cpu(), self.global_step)

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> list[Path]:
        """Write a ``<id>_mask.png`` per image at its original size; return the paths."""
        from recipes.carvana.predict import write_mask

        logits = self(batch["image"])
        written = []
        for logit, name, height, width in zip(logits, batch["id"], *batch["size"]):
            size = (int(height), int(width))
            mask = F.interpolate(logit[None].float(), size=size, mode="bilinear").argmax(dim=1)[0]
            written.append(write_mask(mask, self.predict_out_dir / f"{name}_mask.png", self.n_classes))
        return written

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        epochs = self.trainer.max_epochs or 1
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(epochs, 1))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


class ImageFolder(Dataset[dict[str, Any]]):
    """Every image of a folder, for ``predict``: the tensor, its id and its original size."""

    def __init__(self, folder: Path, scale: float) -> None:
        self.files = sorted(files_by_stem(folder, IMAGE_SUFFIXES).items())
        if not self.files:
            raise FileNotFoundError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {folder}")
        self.scale = scale

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> dict[str, Any]:
        name, path = self.files[i]
        full = load_image(path)
        return {"image": load_image(path, self.scale), "id": name, "size": tuple(full.shape[1:])}


class CarvanaData(trainer.DataModule):
    """Carvana in its original layout; generates a synthetic set there first if asked."""

    def __init__(
        self,
        root: str = "data/carvana_synth",
        generate: bool = True,
        n_images: int = 300,
        image_size: tuple[int, int] = (160, 240),
        scale: float = 0.5,
        val_percent: float = 10.0,
        batch_size: int = 8,
        num_workers: int = 0,
        split_seed: int = 0,
        predict_dir: str | None = None,
    ) -> None:
        """
        Args:
            root: folder holding ``imgs/`` and ``masks/``.
            generate: write a synthetic set (cars as shapes on textures) into ``root`` if it is missing.
            n_images: synthetic images to generate.
            image_size: synthetic image size (height, width).
            scale: resize factor applied when loading (0.5 halves each side).
            val_percent: share of images held out for validation (fixed-seed split).
            batch_size: per-rank batch size.
            num_workers: DataLoader worker processes per rank.
            split_seed: seed of the train/validation split.
            predict_dir: images to segment with ``predict`` (default: ``root/imgs``).
        """
        self.root = Path(root)
        self.generate = generate
        self.n_images = n_images
        self.image_size = tuple(image_size)
        self.scale = scale
        self.val_percent = val_percent
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.split_seed = split_seed
        self.predict_dir = Path(predict_dir) if predict_dir else self.root / "imgs"

    def prepare_data(self) -> None:
        if self.generate:
            generate_synthetic_carvana(self.root, self.n_images, self.image_size, seed=0)  # type: ignore[arg-type]

    def setup(self, stage: str) -> None:
        if stage == "predict":
            return
        dataset = CarvanaDataset(self.root / "imgs", self.root / "masks", scale=self.scale)
        self.train_set, self.val_set = split_dataset(dataset, self.val_percent, seed=self.split_seed)

    def _loader(self, dataset: Dataset[Any], shuffle: bool) -> DataLoader[Any]:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader[Any]:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(ImageFolder(self.predict_dir, self.scale), batch_size=1)


def summarise(fit: trainer.Trainer) -> None:
    """The lines a user looks for at the end: the score and where everything went."""
    if not fit.is_global_zero:
        return
    dice = fit.callback_metrics.get("val_dice")
    callback = fit.checkpoint_callback
    print("\n== UNet / Carvana: done ==")
    if dice is not None:
        print(f"validation dice : {float(dice):.4f}")
    if callback is not None and callback.dirpath is not None and Path(callback.dirpath).is_dir():
        last = callback.last_model_path
        shown = f" (last: {last})" if last and Path(last).exists() else ""
        print(f"checkpoints     : {callback.dirpath}{shown}")
    logger = getattr(fit, "logger", None)
    if type(logger).__name__ == "CSVLogger":
        print(f"metrics         : {Path(fit.log_dir) / 'metrics.csv'}")
    elif logger is not None:
        print(f"logs            : {fit.log_dir} (tensorboard --logdir {fit.log_dir})")
    print(f"sample masks    : {Path(fit.log_dir) / 'samples'}")


def main(args: list[str] | None = None) -> None:
    from trainer.cli import CLI

    cli = CLI(UNetSegmentation, CarvanaData, args=args)
    if cli.subcommand == "fit":
        summarise(cli.trainer)


if __name__ == "__main__":
    main()
