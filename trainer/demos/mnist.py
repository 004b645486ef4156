"""Lightning's MNIST demo (``lightning.pytorch.demos.mnist_datamodule``): ``MNIST`` and ``MNISTDataModule``
with the same splits, loaders and transforms."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split

from trainer.datamodule import DataModule

_DATASETS_PATH = "./data"


class _MNIST(Dataset):
    """The copy of MNIST that Lightning hosts (``MNIST/complete/{training,test}.pt``); ``transform`` is ignored
    (images are normalized with ``normalize``), as in Lightning."""

    RESOURCES = (
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/training.pt",
        "https://pl-public-data.s3.amazonaws.com/MNIST/processed/test.pt",
    )
    TRAIN_FILE_NAME = "training.pt"
    TEST_FILE_NAME = "test.pt"
    cache_folder_name = "complete"

    def __init__(
        self, root: str, train: bool = True, normalize: tuple = (0.1307, 0.3081), download: bool = True, **kwargs: Any
    ) -> None:
        super().__init__()
        self.root = root
        self.train = train
        self.normalize = normalize
        if download and not self._check_exists(self.cached_folder_path):
            self._download(self.cached_folder_path)
        if not self._check_exists(self.cached_folder_path):
            raise RuntimeError(f"MNIST not found in {self.cached_folder_path}: construct it with download=True.")
        data_file = self.TRAIN_FILE_NAME if self.train else self.TEST_FILE_NAME
        self.data, self.targets = torch.load(os.path.join(self.cached_folder_path, data_file))

    def __getitem__(self, idx: int) -> tuple[Tensor, int]:
        img = self.data[idx].float().unsqueeze(0)
        if self.normalize is not None and len(self.normalize) == 2:
            mean, std = (torch.as_tensor(v, dtype=img.dtype) for v in self.normalize)
            img = img.sub(mean).div(std)
        return img, int(self.targets[idx])

    def __len__(self) -> int:
        return len(self.data)

    @property
    def cached_folder_path(self) -> str:
        return os.path.join(self.root, "MNIST", self.cache_folder_name)

    def _check_exists(self, folder: str) -> bool:
        return all(os.path.isfile(os.path.join(folder, f)) for f in (self.TRAIN_FILE_NAME, self.TEST_FILE_NAME))

    def _download(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)
        for url in self.RESOURCES:
            urllib.request.urlretrieve(url, os.path.join(folder, os.path.basename(url)))


def MNIST(*args: Any, **kwargs: Any) -> Dataset:
    """torchvision's ``MNIST(*args, **kwargs)`` where torchvision is installed, else the copy Lightning hosts
    (also with ``PL_USE_MOCKED_MNIST`` set). Lightning first downloads torchvision's MNIST to ``./data`` as a
    check whatever ``root`` is; this does not."""
    from trainer.utilities.imports import _TORCHVISION_AVAILABLE

    if _TORCHVISION_AVAILABLE and not os.getenv("PL_USE_MOCKED_MNIST"):
        from torchvision.datasets import MNIST as TorchvisionMNIST

        return TorchvisionMNIST(*args, **kwargs)
    return _MNIST(*args, **kwargs)


class MNISTDataModule(DataModule):
    """MNIST's training images split into ``len - val_split`` for training and ``val_split`` for validation
    (a fixed generator, seed 42), the test images for testing."""

    name = "mnist"

    def __init__(
        self,
        data_dir: str = _DATASETS_PATH,
        val_split: int = 5000,
        num_workers: int = 16,
        normalize: bool = False,
        seed: int = 42,
        batch_size: int = 32,
    ) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = 0 if os.name == "nt" else num_workers  # Lightning sets 0 on Windows too
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    def prepare_data(self) -> None:
        MNIST(self.data_dir, train=True, download=True)
        MNIST(self.data_dir, train=False, download=True)

    def setup(self, stage: str) -> None:
        extra = {"transform": self.default_transforms} if self.default_transforms else {}
        dataset = MNIST(self.data_dir, train=True, download=False, **extra)
        train_length = len(dataset)  # type: ignore[arg-type]
        self.dataset_train, self.dataset_val = random_split(
            dataset, [train_length - self.val_split, self.val_split], generator=torch.Generator().manual_seed(42)
        )

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            drop_last=True,
            pin_memory=True,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_val, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        extra = {"transform": self.default_transforms} if self.default_transforms else {}
        return self._loader(MNIST(self.data_dir, train=False, download=False, **extra), shuffle=False)

    @property
    def default_transforms(self) -> Callable | None:
        from trainer.utilities.imports import _TORCHVISION_AVAILABLE

        if not _TORCHVISION_AVAILABLE:
            return None
        from torchvision import transforms

        if self.normalize:
            return transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean=(0.5,), std=(0.5,))])
        return transforms.ToTensor()
