"""Transfer learning with a BaseFinetuning subclass, in the style of Lightning's
computer_vision_fine_tuning.py template: the backbone (with BatchNorm) is frozen before training and
unfrozen at the milestones, its parameters added to the optimizer as a new param group.

Run: python finetuning.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: from lightning.pytorch import LightningModule, Trainer, seed_everything
# lightning: from lightning.pytorch.callbacks.finetuning import BaseFinetuning
from argparse import ArgumentParser

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import MultiStepLR
from torch.utils.data import DataLoader, TensorDataset

from trainer import Module as LightningModule, Trainer, seed_everything
from trainer.callbacks import BaseFinetuning


class MilestonesFinetuning(BaseFinetuning):
    def __init__(self, milestones: tuple = (1, 2), train_bn: bool = False):
        super().__init__()
        self.milestones = milestones
        self.train_bn = train_bn

    def freeze_before_training(self, pl_module: LightningModule):
        self.freeze(modules=pl_module.feature_extractor, train_bn=self.train_bn)

    def finetune_function(self, pl_module: LightningModule, epoch: int, optimizer):
        if epoch == self.milestones[0]:
            # unfreeze 2 last layers
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor[-2:], optimizer=optimizer, train_bn=self.train_bn
            )

        elif epoch == self.milestones[1]:
            # unfreeze remaining layers
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor[:-2], optimizer=optimizer, train_bn=self.train_bn
            )


class TransferLearningModel(LightningModule):
    def __init__(self, milestones: tuple = (1, 2), lr: float = 1e-2, lr_scheduler_gamma: float = 1e-1):
        super().__init__()
        self.milestones = milestones
        self.lr = lr
        self.lr_scheduler_gamma = lr_scheduler_gamma
        self.__build_model()

    def __build_model(self):
        # 1. Load pre-trained network (here: a small randomly initialised one):
        self.feature_extractor = nn.Sequential(
            nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)
        )

        # 2. Classifier:
        self.fc = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))

        # 3. Loss:
        self.loss_func = F.binary_cross_entropy_with_logits

    def forward(self, x):
        x = self.feature_extractor(x)
        return self.fc(x)

    def loss(self, logits, labels):
        return self.loss_func(input=logits, target=labels)

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_logits = self.forward(x)
        train_loss = self.loss(y_logits, y)
        self.log("train_loss", train_loss, prog_bar=True)
        return train_loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_logits = self.forward(x)
        self.log("val_loss", self.loss(y_logits, y), prog_bar=True)

    def on_train_epoch_start(self):
        optimizer = self.trainer.optimizers[0]
        self.print(f"epoch={self.current_epoch} param_groups={len(optimizer.param_groups)}")

    def configure_optimizers(self):
        parameters = list(self.parameters())
        trainable_parameters = list(filter(lambda p: p.requires_grad, parameters))
        self.print(
            f"The model will start training with only {len(trainable_parameters)} "
            f"trainable parameters out of {len(parameters)}."
        )
        optimizer = torch.optim.Adam(trainable_parameters, lr=self.lr)
        scheduler = MultiStepLR(optimizer, milestones=self.milestones, gamma=self.lr_scheduler_gamma)
        return [optimizer], [scheduler]


def main(args):
    seed_everything(0)
    x = torch.randn(256, 16)
    y = (x[:, :4].sum(dim=1, keepdim=True) > 0).float()
    train_loader = DataLoader(TensorDataset(x[:192], y[:192]), batch_size=32, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[192:], y[192:]), batch_size=32)

    model = TransferLearningModel(milestones=(1, 2))
    backbone_before = [p.detach().clone() for p in model.feature_extractor.parameters()]
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=args.strategy,
        max_epochs=3,
        callbacks=[MilestonesFinetuning(milestones=(1, 2))],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, train_loader, val_loader)
    optimizer = trainer.optimizers[0]
    backbone_changed = [not torch.equal(a, b) for a, b in zip(backbone_before, model.feature_extractor.parameters())]
    if trainer.is_global_zero:
        print(f"final param_groups={len(optimizer.param_groups)} lrs={[g['lr'] for g in optimizer.param_groups]}")
        print(f"backbone_changed={backbone_changed}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    main(parser.parse_args())
