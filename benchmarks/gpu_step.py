"""GPU step cost: a raw PyTorch loop vs steadytrain vs Lightning (where installed), in one process; and the
whole step captured as a CUDA graph, written by hand and by ``Trainer(cuda_graph=True)``.

Workloads (batches already on the device, so the loader costs nothing):
  tiny       MLP 64 wide, batch 64, fp32: launch-bound, shows per-step Python cost and forced syncs
  medium     MLP 4096 wide x 4, batch 512, bf16-mixed: GPU and CPU both busy
  unet-bf16  the recipe's UNet (base 64) at 256x256, batch 16, bf16-mixed: compute-bound
  unet-fp16  the same in 16-mixed (GradScaler)
"typical" rows log the loss to the progress bar every step, with the default logger, progress bar
and checkpointing on, as users run. Steady per-step time runs from step 10 (after a device
synchronization) to the epoch's end; rounds rotate which system goes first, and each ratio is the
median of the per-round ratios to the raw loop. ``--syncs`` lists where each system synchronizes
with the device (``torch.cuda.set_sync_debug_mode``) instead of timing.

Systems (``--systems``): ``raw`` (the hand-written eager loop), ``graph`` (the hand-written whole-step
CUDA graph of PyTorch's guide, ``benchmarks/raw_graph.py``; it logs nothing, in both rows), ``ours``,
``ours-graph`` (``Trainer(cuda_graph=True)``; its fit-end summary line is printed once per case, so a
run that fell back to eager says so) and ``lightning``. The graph systems need CUDA and refuse 16-mixed
(n/a there). Each row also gives the peak GPU memory a system allocated beyond the raw loop's.

    python benchmarks/gpu_step.py [--rounds 3] [--only tiny medium] [--systems raw graph ours ours-graph]
                                  [--bare] [--syncs] [--quick]

``--quick`` is a smoke run (a few steps, small inputs; on CPU where there is no GPU): it checks the
benchmark runs, its figures mean nothing.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.raw_graph import run_graph as graph_loop

DEV = "cuda" if torch.cuda.is_available() else "cpu"
SYSTEMS = ("raw", "graph", "ours", "ours-graph", "lightning")
GRAPH_SYSTEMS = ("graph", "ours-graph")
WARM = 10  # steady-state timing starts at this step (after a device sync) and ends after the last
Batch = tuple[torch.Tensor, torch.Tensor]
Work = tuple[Callable[[], nn.Module], list[Batch], Callable[..., torch.Tensor], str, float]
WORK: dict[str, Work] = {}
CASES = [
    ("tiny", False),
    ("tiny", True),
    ("medium", False),
    ("medium", True),
    ("unet-bf16", False),
    ("unet-fp16", True),
]


def mlp(width: int, depth: int, n_in: int = 64) -> nn.Module:
    layers: list[nn.Module] = []
    d = n_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    return nn.Sequential(*layers, nn.Linear(d, 1))


def unet() -> nn.Module:
    from recipes.carvana.model import UNet

    return UNet(n_channels=3, n_classes=2, base=8 if DEV == "cpu" else 64)


class Batches(torch.utils.data.Dataset[Batch]):
    """Pre-built batches on the device; ``DataLoader(batch_size=None)`` yields them as they are."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        return self.batches[i]


def make_work(quick: bool) -> None:
    g = torch.Generator().manual_seed(0)

    def pairs(n: int, x: tuple[int, ...], y: Callable[[], torch.Tensor]) -> list[Batch]:
        return [(torch.randn(*x, generator=g).to(DEV), y().to(DEV)) for _ in range(n)]

    tiny = pairs(WARM + 20 if quick else 800, (64, 64), lambda: torch.randn(64, 1, generator=g))
    width, rows = (256, 64) if quick else (4096, 512)
    med = pairs(16, (rows, 64), lambda: torch.randn(rows, 1, generator=g)) * ((WARM + 6 if quick else 300) // 16 + 1)
    side, n = (32, WARM + 4) if quick else ((64, 40) if DEV == "cpu" else (256, 40))
    rows = 2 if quick else 16
    seg = pairs(4, (rows, 3, side, side), lambda: torch.randint(0, 2, (rows, side, side), generator=g)) * (n // 4 + 1)
    WORK["tiny"] = (lambda: mlp(64, 2), tiny, F.mse_loss, "32-true", 1e-3)
    WORK["medium"] = (lambda: mlp(width, 4), med, F.mse_loss, "bf16-mixed", 1e-4)
    WORK["medium-fp16"] = (lambda: mlp(width, 4), med, F.mse_loss, "16-mixed", 1e-4)
    WORK["unet-bf16"] = (unet, seg, F.cross_entropy, "bf16-mixed", 1e-4)
    WORK["unet-fp16"] = (unet, seg, F.cross_entropy, "16-mixed", 1e-4)


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


@dataclass
class Timing:
    whole: float  # seconds, the whole run
    steady: float  # seconds, from step WARM to the end
    peak: int = 0  # bytes: the most GPU memory allocated during the run
    note: str = ""  # what the run said about itself (the captured fit's summary)


def run_raw(name: str, typical: bool) -> tuple[float, float]:
    """The hand-written loop: (whole run, steady part) in seconds."""
    build, batches, loss_fn, precision, lr = WORK[name]
    torch.manual_seed(0)
    model = build().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(DEV) if precision == "16-mixed" else None
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    loader = torch.utils.data.DataLoader(Batches(batches), batch_size=None)
    sync()
    start = steady = time.perf_counter()
    model.train()
    for i, (x, y) in enumerate(loader):
        if i == WARM:
            sync()
            steady = time.perf_counter()
        with torch.autocast(DEV, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    sync()
    end = time.perf_counter()
    return end - start, end - steady


def framework(kind: str) -> tuple[Any, type, type]:
    """(package, Module base, Callback base) of ``kind``: "ours" or "lightning"."""
    if kind == "ours":
        import trainer as fw

        return fw, fw.Module, fw.Callback
    import lightning.pytorch as lfw

    return lfw, lfw.LightningModule, lfw.Callback


def run_framework(kind: str, name: str, typical: bool, **extra: Any) -> tuple[float, float, str]:
    """The same steps through a Trainer: (whole fit, steady part) in seconds, and the cuda_graph summary line."""
    build, batches, loss_fn, precision, lr = WORK[name]
    fw, module_base, callback_base = framework(kind)

    class Clock(callback_base):  # type: ignore[misc,valid-type]
        t0 = t1 = 0.0

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int, *rest: Any) -> None:
            if batch_idx == WARM:
                sync()
                self.t0 = time.perf_counter()

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            sync()
            self.t1 = time.perf_counter()

    class Model(module_base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.net = build()

        def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = loss_fn(self.net(x), y)
            if typical:
                self.log("train_loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=lr)

    clock = Clock()
    torch.manual_seed(0)
    model = Model()
    kw: dict[str, Any] = dict(
        accelerator="gpu" if DEV == "cuda" else "cpu",
        devices=1,
        precision=precision,
        max_epochs=1,
        default_root_dir=tempfile.mkdtemp(),
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[clock],
    )
    if not typical:
        kw.update(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    kw.update(extra)
    loader = torch.utils.data.DataLoader(Batches(batches), batch_size=None)
    # The bar draws (its cost is part of the step) but off the log.
    printed = io.StringIO()
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null), contextlib.redirect_stdout(printed):
        sync()
        start = time.perf_counter()
        fw.Trainer(**kw).fit(model, loader)
        sync()
        whole = time.perf_counter() - start
    said = [line for line in printed.getvalue().splitlines() if line.startswith("steadytrain: cuda_graph:")]
    return whole, clock.t1 - clock.t0, " ".join(said)


def run_hand_graph(name: str) -> tuple[float, float]:
    """The hand-written whole-step graph (``benchmarks/raw_graph.py``) on the raw loop's data and optimizer."""
    build, batches, loss_fn, precision, lr = WORK[name]
    torch.manual_seed(0)
    model = build().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, capturable=True)
    dtype = {"bf16-mixed": torch.bfloat16}.get(precision)
    loader = torch.utils.data.DataLoader(Batches(batches), batch_size=None)
    return graph_loop(model, opt, loader, loss_fn, dtype, WARM)


def run(system: str, name: str, typical: bool) -> Timing | None:
    """One run of ``system``; None where it cannot run (a CUDA graph without CUDA, or with 16-mixed)."""
    if system in GRAPH_SYSTEMS and (DEV != "cuda" or WORK[name][3] == "16-mixed"):
        return None
    if DEV == "cuda":
        torch.cuda.reset_peak_memory_stats()
    note = ""
    if system == "raw":
        whole, steady = run_raw(name, typical)
    elif system == "graph":
        whole, steady = run_hand_graph(name)
    else:
        extra = {"cuda_graph": True} if system == "ours-graph" else {}
        whole, steady, note = run_framework("lightning" if system == "lightning" else "ours", name, typical, **extra)
    peak = torch.cuda.max_memory_allocated() if DEV == "cuda" else 0
    return Timing(whole, steady, peak, note)


def systems(wanted: list[str] | None = None) -> list[str]:
    """The systems to time, raw first; Lightning only where it is installed."""
    names = [s for s in SYSTEMS if wanted is None or s in wanted or s == "raw"]
    try:
        import lightning.pytorch  # noqa: F401
    except ImportError:
        names = [s for s in names if s != "lightning"]
    return names


def time_case(case: tuple[str, bool], names: list[str], rounds: int, warm_up: bool) -> dict[str, list[float]]:
    """Each system's timings for one case over rotated rounds; prints the case's rows."""
    for system in names if warm_up else []:  # warm-up: kernels, cuDNN autotuning, the allocator, imports
        run(system, *case)
    times: dict[str, list[Timing | None]] = {s: [] for s in names}
    for r in range(rounds):
        for system in names[r % len(names) :] + names[: r % len(names)]:
            times[system].append(run(system, *case))
    steady: dict[str, list[float]] = {}
    for steady_part in (True, False):
        steps = len(WORK[case[0]][1]) - (WARM if steady_part else 0)
        row, ratios = time_row(case, names, times, steady_part, steps)
        steady.update(ratios if steady_part else {})
        print("  ".join(row), flush=True)
    notes = {t.note for t in times.get("ours-graph", []) if t is not None and t.note}
    for note in sorted(notes):
        print(f"   ours-graph said: {note}", flush=True)
    return steady


def time_row(
    case: tuple[str, bool], names: list[str], times: dict[str, list[Timing | None]], steady_part: bool, steps: int
) -> tuple[list[str], dict[str, list[float]]]:
    """One printed row (steady or whole) and each system's per-round ratios to raw (and ours-graph's to graph)."""

    def seconds(t: Timing) -> float:
        return t.steady if steady_part else t.whole

    ran = {s: [t for t in times[s] if t is not None] for s in names}
    raw = ran["raw"]
    what = "steady" if steady_part else "whole"
    row = [f"{case[0] + ('/typical' if case[1] else '/bare'):18s} {what:6s} steps={steps:5d} "]
    row.append(f"raw {statistics.median(seconds(t) for t in raw) / steps * 1e3:8.3f} ms")
    ratios: dict[str, list[float]] = {}
    for system in names[1:]:
        mine = ran[system]
        if len(mine) != len(raw):
            row.append(f"{system} n/a")
            continue
        ratios[system] = [seconds(x) / seconds(y) for x, y in zip(mine, raw)]
        notes = [f"{statistics.median(ratios[system]):.3f}x"]
        if system == "ours-graph" and len(ran.get("graph", [])) == len(mine):
            ratios["ours-graph/graph"] = [seconds(x) / seconds(y) for x, y in zip(mine, ran["graph"])]
            notes.append(f"{statistics.median(ratios['ours-graph/graph']):.3f}x graph")
        if DEV == "cuda":  # the most memory it allocated beyond what the raw loop did
            notes.append(f"+{(max(t.peak for t in mine) - max(t.peak for t in raw)) / 2**20:.0f} MiB")
        row.append(f"{system} {statistics.median(seconds(t) for t in mine) / steps * 1e3:8.3f} ms ({', '.join(notes)})")
    return row, ratios


def time_cases(cases: list[tuple[str, bool]], names: list[str], rounds: int, warm_up: bool = True) -> None:
    """Prints each case as it finishes (a run cut short by a time limit keeps what it measured)."""
    print(f"-- per-step time, median of {rounds} rounds; ratio = median of per-round ratios to raw", flush=True)
    summary: dict[str, list[str]] = {}
    for case in cases:
        for system, ratios in time_case(case, names, rounds, warm_up).items():
            summary.setdefault(system, []).append(f"{case[0]}{'/t' if case[1] else ''} {statistics.median(ratios):.3f}")
    for system, parts in summary.items():
        against = "" if "/" in system else "/raw"
        print(f"= {system}{against} steady: " + ", ".join(parts), flush=True)


def sync_sites(system: str, name: str, typical: bool, **extra: Any) -> None:
    """Where ``system`` synchronizes with the device over a whole run (CUDA's sync debug mode)."""
    if DEV != "cuda":
        run(system, name, typical)  # nothing to count without a GPU; the smoke run only checks it runs
        print(f"-- {system} {name}: no CUDA device, synchronizations not counted", flush=True)
        return
    sites: collections.Counter[str] = collections.Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            if system == "raw":
                run_raw(name, typical)
            else:
                run_framework(system, name, typical, **extra)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    for w in caught:
        if "synchroniz" in str(w.message):
            sites[f"{w.filename.split('site-packages/')[-1]}:{w.lineno}"] += 1
    steps = len(WORK[name][1])
    label = f"{system} {name}{'/typical' if typical else '/bare'} {extra or ''}"
    print(f"-- {label}: {sum(sites.values())} synchronizations in {steps} steps", flush=True)
    for site, count in sites.most_common(8):
        print(f"   {count:6d}  {site}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few steps, small inputs")
    parser.add_argument("--only", nargs="*", help="workloads to run (tiny, medium, unet-bf16, unet-fp16)")
    parser.add_argument("--bare", action="store_true", help="only the bare rows (no logging, bar or checkpoint)")
    parser.add_argument("--syncs", action="store_true", help="list synchronization sites instead of timing")
    parser.add_argument("--systems", nargs="*", choices=SYSTEMS, help="systems to time (raw always runs)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    systems()  # imports Lightning, which sets its loggers' levels: quiet its banners after that
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    make_work(args.quick)
    cases = [c for c in CASES if (not args.only or c[0] in args.only) and not (args.bare and c[1])]
    device = torch.cuda.get_device_name() if DEV == "cuda" else "cpu (no CUDA device: a smoke run, not a measurement)"
    print(f"device: {device}  torch {torch.__version__}", flush=True)
    if args.syncs:  # the medium MLP in bf16 (bare, typical) and in fp16, whose GradScaler.step reads a flag
        for name, typical in (("medium", False), ("medium", True), ("medium-fp16", False)):
            for system in systems(["ours", "lightning"]):
                sync_sites(system, name, typical)
        sync_sites("ours", "medium", False, on_nonfinite_loss="off")
        return
    time_cases(cases, systems(args.systems), args.rounds, warm_up=not args.quick)


if __name__ == "__main__":
    main()
