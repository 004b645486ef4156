"""Lightning's transformer demo (``lightning.pytorch.demos.transformer``): the same ``Transformer`` (built in
the same order, so a seed gives the same weights) and the same ``WikiText2`` tokenization."""

from __future__ import annotations

import math
import os
import urllib.request
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules import MultiheadAttention
from torch.utils.data import DataLoader, Dataset

from trainer.module import Module

WIKITEXT2_URL = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"

if hasattr(MultiheadAttention, "_reset_parameters") and not hasattr(MultiheadAttention, "reset_parameters"):
    MultiheadAttention.reset_parameters = MultiheadAttention._reset_parameters  # type: ignore[attr-defined]  # pytorch#107909


class Transformer(nn.Module):
    """``nn.Transformer`` over word embeddings with sinusoidal positions; returns log-probabilities per token."""

    def __init__(
        self,
        vocab_size: int = 33278,  # WikiText2's
        ninp: int = 200,
        nhead: int = 2,
        nhid: int = 200,
        nlayers: int = 2,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(
            d_model=ninp,
            nhead=nhead,
            num_encoder_layers=nlayers,
            num_decoder_layers=nlayers,
            dim_feedforward=nhid,
            dropout=dropout,
            batch_first=True,
        )
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp
        self.vocab_size = vocab_size
        self.src_mask: Tensor | None = None

    def generate_square_subsequent_mask(self, size: int) -> Tensor:
        """``-inf`` above the diagonal: no token sees a later one."""
        mask = torch.triu(torch.ones(size, size), diagonal=1)
        return mask.float().masked_fill(mask == 1, float("-inf")).masked_fill(mask == 0, 0.0)

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        _, t = inputs.shape
        if self.src_mask is None or self.src_mask.size(0) != t:  # kept, though unused, as Lightning's
            self.src_mask = self.generate_square_subsequent_mask(t).to(inputs.device)
        if mask is None:
            mask = self.generate_square_subsequent_mask(t).to(inputs.device)
        src = self.pos_encoder(self.embedding(inputs) * math.sqrt(self.ninp))
        target = self.pos_encoder(self.embedding(target) * math.sqrt(self.ninp))
        output = self.decoder(self.transformer(src, target, tgt_mask=mask))
        return F.log_softmax(output, dim=-1).view(-1, self.vocab_size)


class PositionalEncoding(nn.Module):
    """Sinusoidal position encoding plus dropout (Lightning's: it adds the row at the sequence length)."""

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        self.pe: Tensor | None = None  # neither a buffer nor a parameter, as Lightning's (DDP, slicing)

    def forward(self, x: Tensor) -> Tensor:
        if self.pe is None:
            self.pe = self._init_pos_encoding(device=x.device)
        x = x + self.pe[:, x.size(1)]
        return self.dropout(x)

    def _init_pos_encoding(self, device: torch.device) -> Tensor:
        pe = torch.zeros(self.max_len, self.dim, device=device)
        position = torch.arange(0, self.max_len, dtype=torch.float, device=device).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, self.dim, 2, device=device).float() * (-math.log(10000.0) / self.dim))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        return pe.unsqueeze(0)


class WikiText2(Dataset):
    """WikiText-2's training text as (input, next-word target) blocks of ``block_size`` word ids."""

    def __init__(self, data_dir: Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if download:
            self.download(self.path)
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        start = index * self.block_size
        end = start + self.block_size
        return self.data[start:end], self.data[start + 1 : end + 1]

    @staticmethod
    def download(destination: Path) -> None:
        """Fetch the text once (a file already there is kept)."""
        os.makedirs(destination.parent, exist_ok=True)
        if os.path.exists(destination):
            return
        with urllib.request.urlopen(WIKITEXT2_URL) as response:
            text = response.read().decode("utf8")
        with open(destination, "w") as f:
            f.write(text)


class Dictionary:
    """Word <-> id, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: Path) -> tuple[Tensor, Dictionary]:
    """Every word of the file (with ``<eos>`` after each line) as one tensor of ids, and the dictionary."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"WikiText2: {path} does not exist (construct it with download=True)")
    dictionary = Dictionary()
    with open(path, encoding="utf8") as f:
        lines = [[*line.split(), "<eos>"] for line in f]
    ids = [torch.tensor([dictionary.add_word(word) for word in words]).type(torch.int64) for words in lines]
    return torch.cat(ids), dictionary


class LightningTransformer(Module):
    """``Transformer`` trained on ``WikiText2`` with SGD(lr=0.1)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        return F.nll_loss(self(inputs, target), target.view(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(WikiText2())
