"""Carvana car segmentation: UNet, dataset in the Kaggle layout, a synthetic generator, dice."""

from .data import CarvanaDataset, split_dataset
from .losses import dice_loss, dice_score, make_dice_metric
from .model import UNet
from .predict import predict_masks
from .synthetic import generate_synthetic_carvana

__all__ = [
    "CarvanaDataset",
    "UNet",
    "dice_loss",
    "dice_score",
    "generate_synthetic_carvana",
    "make_dice_metric",
    "predict_masks",
    "split_dataset",
]
