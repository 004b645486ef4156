"""BaseFinetuning and BackboneFinetuning as in Lightning's docs."""

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BackboneFinetuning, BaseFinetuning
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class FeatureExtractorFreezeUnfreeze(BaseFinetuning):
    def __init__(self, unfreeze_at_epoch=10):
        super().__init__()
        self._unfreeze_at_epoch = unfreeze_at_epoch

    def freeze_before_training(self, pl_module):
        # freeze any module you want
        # Here, we are freezing `feature_extractor`
        self.freeze(pl_module.feature_extractor)

    def finetune_function(self, pl_module, current_epoch, optimizer):
        # When `current_epoch` is 10, feature_extractor will start training.
        if current_epoch == self._unfreeze_at_epoch:
            self.unfreeze_and_add_param_group(
                modules=pl_module.feature_extractor,
                optimizer=optimizer,
                train_bn=True,
            )


class MyModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.feature_extractor = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.classifier = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.classifier(self.feature_extractor(x)), y)

    def configure_optimizers(self):
        # Make sure to filter the parameters based on `requires_grad`
        return torch.optim.Adam(filter(lambda p: p.requires_grad, self.parameters()))


class TransferLearningModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.head(self.backbone(x)), y)

    def configure_optimizers(self):
        # Initially only optimize the head - backbone will be added by callback
        return torch.optim.Adam(self.head.parameters(), lr=1e-3)


if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = MyModel()
    frozen = [p.detach().clone() for p in model.feature_extractor.parameters()]
    trainer = Trainer(max_epochs=2, callbacks=[FeatureExtractorFreezeUnfreeze(unfreeze_at_epoch=1)])
    trainer.fit(model, data)
    assert len(trainer.optimizers[0].param_groups) == 2
    assert all(not torch.equal(a, b) for a, b in zip(frozen, model.feature_extractor.parameters()))

    multiplicative = lambda epoch: 1.5  # noqa: E731
    backbone_finetuning = BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=multiplicative)
    trainer = Trainer(max_epochs=3, callbacks=[backbone_finetuning])
    trainer.fit(TransferLearningModel(), data)
    head, backbone = (g["lr"] for g in trainer.optimizers[0].param_groups)
    assert head == 1e-3 and abs(backbone - 1e-3 * 0.1 * 1.5) < 1e-12, backbone
