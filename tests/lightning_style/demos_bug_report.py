"""A bug report built on Lightning's demos, as its bug-report template and issue threads do: a subclass of
``BoringModel`` on ``RandomDataset`` and on ``BoringDataModule``, then the ``Transformer`` demo on
``WikiText2`` (its text file written here, so nothing is downloaded), as basics/transformer.py trains it.

Run: python demos_bug_report.py [--devices 2 --strategy ddp]
"""

# Lightning's import lines; each is replaced, one for one and in order, by its steadytrain line below:
# lightning: import lightning as L
# lightning: from lightning.pytorch.demos import BoringDataModule, BoringModel, Transformer, WikiText2
# lightning: from lightning.pytorch.demos.boring_classes import RandomDataset
import os
import random
from argparse import ArgumentParser

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split

import trainer as L
from trainer.demos import BoringDataModule, BoringModel, Transformer, WikiText2
from trainer.demos import RandomDataset


class LoggingBoringModel(BoringModel):
    def training_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log("train_loss", loss)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx):
        self.log("valid_loss", self.step(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.step(batch))


class LanguageModel(L.LightningModule):
    def __init__(self, vocab_size):
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size, ninp=32, nhead=2, nhid=32, nlayers=1)

    def training_step(self, batch, batch_idx):
        input, target = batch
        loss = F.nll_loss(self.model(input, target), target.view(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        input, target = batch
        self.log("val_loss", F.nll_loss(self.model(input, target), target.view(-1)), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def write_text(path="data/wikitext-2.txt"):
    rnd = random.Random(0)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = [" ".join(rnd.choices([f"w{i}" for i in range(50)], k=rnd.randint(3, 12))) for _ in range(300)]
    with open(f"{path}.{os.getpid()}", "w") as f:  # each rank writes its own, then renames: no torn reads
        f.write("\n".join(lines) + "\n")
    os.replace(f"{path}.{os.getpid()}", path)


def run(args):
    flags = dict(accelerator=args.accelerator, devices=args.devices, strategy=args.strategy)
    quiet = dict(enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, max_epochs=1)
    trainer = L.Trainer(limit_train_batches=4, limit_val_batches=2, limit_test_batches=2, **flags, **quiet)
    train, val = DataLoader(RandomDataset(32, 64), batch_size=2), DataLoader(RandomDataset(32, 64))
    trainer.fit(LoggingBoringModel(), train, val)
    tested = trainer.test(LoggingBoringModel(), dataloaders=DataLoader(RandomDataset(32, 64), batch_size=2))
    dm_trainer = L.Trainer(**flags, **quiet)
    dm_trainer.fit(BoringModel(), datamodule=BoringDataModule())
    if trainer.is_global_zero:
        print(f"boring: global_step={trainer.global_step} test={tested[0]['test_loss']:.6f}")
        print(f"datamodule: global_step={dm_trainer.global_step} lr={dm_trainer.optimizers[0].param_groups[0]['lr']}")

    L.seed_everything(42)
    write_text()
    dataset = WikiText2()
    n = len(dataset)
    train, val = random_split(dataset, [n - 20, 20])
    model = LanguageModel(vocab_size=dataset.vocab_size)
    lm_trainer = L.Trainer(gradient_clip_val=0.25, max_epochs=2, **flags, enable_progress_bar=False)
    lm_trainer.fit(model, DataLoader(train, batch_size=8, shuffle=True), DataLoader(val, batch_size=8))
    if lm_trainer.is_global_zero:
        val_loss = lm_trainer.callback_metrics["val_loss"]
        print(f"transformer: vocab={dataset.vocab_size} samples={n} val_loss={val_loss:.6f}")


if __name__ == "__main__":
    parser = ArgumentParser()
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    run(parser.parse_args())
