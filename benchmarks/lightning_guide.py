"""The migration guide's generated parts, from a run of benchmarks/lightning_tests.py.

``python benchmarks/lightning_tests.py --guide --out DIR`` rewrites, in docs/migration/from-lightning.md,
the table of "What a port cannot find" and the list of Lightning tests that show a documented difference,
between their ``<!-- generated -->`` markers. The names come from two places, so the table misses neither:

- the run's ``import`` failures: each name a Lightning test file imports that a port cannot find, with how many
  Lightning-passing tests it stopped;
- every public name of Lightning's ``lightning.pytorch`` modules (``SURFACE``) whose ported import fails.

What to use instead is the one hand-written part (``ADVICE``); a name without advice says so.
"""

from __future__ import annotations

import importlib
import json
import re
import typing
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.lightning_tests_classes import DIFFERENCES
from tests.lightning_port import port

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "migration" / "from-lightning.md"
SURFACE: tuple[str, ...] = ("", "callbacks", "loggers", "profilers", "utilities", "tuner", "cli", "strategies")
SURFACE += ("demos", "core", "trainer")
NO_ADVICE = "not ported yet"
TIE = "tie the parameters in the module (`self.decoder.weight = self.encoder.weight`)"
ADVICE: dict[str, str] = {
    "callbacks.RichModelSummary": "`ModelSummary`",
    "callbacks.Checkpoint": "`ModelCheckpoint`, or a `Callback` that calls `trainer.save_checkpoint(path)`",
    "callbacks.OnExceptionCheckpoint": "SIGTERM/SIGUSR1 already save `interrupted.ckpt`; for other failures, "
    "`trainer.save_checkpoint` in a callback's `on_exception`",
    "callbacks.ModelPruning": "`torch.nn.utils.prune` in a callback's `on_train_epoch_end`",
    "callbacks.SpikeDetection": '`Trainer(on_nonfinite_loss="skip")` for non-finite losses; a callback\'s '
    "`on_train_batch_end` for spikes",
    "callbacks.ThroughputMonitor": '`profiler="simple"` (time per step), or a callback that times '
    "`on_train_batch_start/end`",
    "callbacks.WeightAveraging": "`StochasticWeightAveraging`, or `torch.optim.swa_utils.AveragedModel`",
    "callbacks.EMAWeightAveraging": "`StochasticWeightAveraging`, or `torch.optim.swa_utils.AveragedModel` with "
    "`get_ema_multi_avg_fn`",
    "callbacks.Tqdm": "`TQDMProgressBar` (its bars are `tqdm.tqdm`)",
    "callbacks.RichProgressBarTheme": "`RichProgressBar()` with its default theme",
    "loggers.CometLogger": "`CSVLogger`, `TensorBoardLogger`, `WandbLogger`, `MLFlowLogger`, or a `Logger` subclass",
    "loggers.NeptuneLogger": "`CSVLogger`, `TensorBoardLogger`, `WandbLogger`, `MLFlowLogger`, or a `Logger` subclass",
    "loggers.LitLogger": "`CSVLogger`, `TensorBoardLogger`, `WandbLogger`, `MLFlowLogger`, or a `Logger` subclass",
    "profilers.XLAProfiler": "none: steadytrain does not run on TPUs",
    "utilities.measure_flops": "`torch.utils.flop_counter.FlopCounterMode`",
    "utilities.find_shared_parameters": TIE,
    "utilities.set_shared_parameters": TIE,
    "utilities.GradClipAlgorithmType": 'the strings `"norm"` / `"value"`',
    "utilities.LightningEnum": "`enum.StrEnum`",
    "utilities.is_picklable": "`pickle.dumps` in a `try`",
    "utilities.is_shared_filesystem": "your cluster's documentation",
    "utilities.suggested_max_num_workers": "`len(os.sched_getaffinity(0))`",
    "utilities.disable_possible_user_warnings": "`warnings.filterwarnings`",
    "cli.instantiate_module": "`cli.instantiate_class`",
    "plugins": "`Trainer(precision=...)` for precision; the launch environment is read from torchrun/SLURM itself",
    "strategies.DeepSpeedStrategy": '`strategy="fsdp"` (FSDP2: parameters, gradients and optimizer state sharded)',
    "strategies.XLAStrategy": "none: steadytrain does not run on TPUs",
    "strategies.SingleDeviceXLAStrategy": "none: steadytrain does not run on TPUs",
    "strategies.ModelParallelStrategy": '`strategy="fsdp"`; tensor parallelism (`torch.distributed.tensor.parallel`) '
    "is not wrapped",
}
START, END = "<!-- generated: {} -->", "<!-- end generated: {} -->"


def lightning_public_names(module: Any) -> list[str]:
    """A Lightning module's ``__all__``, else what it defines itself (``cli`` has no ``__all__``)."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and getattr(obj, "__module__", None) == module.__name__
        and not isinstance(obj, typing.TypeVar)
    ]


def missing_from_surface() -> set[str]:
    """Each public name of ``SURFACE`` whose ported import line fails (needs Lightning installed)."""
    missing = set()
    for sub in SURFACE:
        name = "lightning.pytorch" + (f".{sub}" if sub else "")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
        for public in lightning_public_names(module):
            if sub == "tuner" and public != "Tuner":
                continue  # the rest of its namespace is its submodules
            try:
                exec(port(f"from {name} import {public}"), {})
            except ImportError:
                missing.add(f"{sub}.{public}".lstrip("."))
    return missing


def missing_from_run(summary: dict) -> Counter[str]:
    """The run's import failures: each missing name (ours, less ``trainer.``) with the tests it stopped."""
    return Counter(
        entry["reason"].removeprefix("trainer.")
        for entries in summary["tests"].values()
        for entry in entries.values()
        if entry.get("class") == "import" and entry["reason"].startswith("trainer.")  # not a library of the test's
    )


def resolves(name: str) -> bool:
    """Whether ``trainer.<name>`` imports, as a module or as a name in its parent."""
    parent, _, last = f"trainer.{name}".rpartition(".")
    try:
        importlib.import_module(f"trainer.{name}")
        return True
    except ImportError:
        pass
    try:
        return hasattr(importlib.import_module(parent), last)
    except ImportError:
        return False


def cannot_find_table(stopped: Counter[str], surface: set[str]) -> str:
    lines = ["| Lightning | Lightning tests it stopped | Use instead |", "|---|---|---|"]
    for name in sorted(set(stopped) | surface, key=lambda n: (-stopped[n], n)):
        lines.append(f"| `{name}` | {stopped[name] or '-'} | {ADVICE.get(name, NO_ADVICE)} |")
    return "\n".join(lines)


def differences_list(summary: dict) -> str:
    shown: dict[str, list[str]] = {pattern: [] for pattern in DIFFERENCES}
    for entries in summary["tests"].values():
        for test in entries:
            for pattern in DIFFERENCES:
                if re.search(pattern, test):
                    shown[pattern].append(test.removeprefix("tests_pytorch."))
    lines = []
    for pattern, (reason, section) in DIFFERENCES.items():
        tests = ", ".join(f"`{t}`" for t in sorted(shown[pattern])) or f"(none in this run: `{pattern}`)"
        lines.append(f"- {section.removeprefix('What differs: ')}: {reason}. Shown by {tests}.")
    return "\n".join(lines)


def refused_table() -> str:
    """``tests/lightning_refused.py``'s table: what of Lightning's surface is refused, why, and what a user reads."""
    from tests.lightning_refused import REFUSED

    lines = ["| Lightning | Why not | What you get |", "|---|---|---|"]
    for key, refusal in sorted(REFUSED.items()):
        message = refusal.message.replace("\\", "").replace("|", "\\|")
        lines.append(f"| `{key}` | {refusal.reason} | an error: {message} ... |")
    return "\n".join(lines)


def replace_between(text: str, key: str, body: str) -> str:
    start, end = START.format(key), END.format(key)
    if start not in text or end not in text:
        raise SystemExit(f"lightning_guide: {GUIDE} has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def write_guide(out: Path, guide: Path = GUIDE) -> None:
    summary = json.loads((out / "summary.json").read_text())
    stopped = missing_from_run(summary)
    table = cannot_find_table(Counter({n: c for n, c in stopped.items() if not resolves(n)}), missing_from_surface())
    text = replace_between(guide.read_text(), "cannot-find", table)
    text = replace_between(text, "differences", differences_list(summary))
    text = replace_between(text, "refused", refused_table())
    guide.write_text(text)
    print(f"lightning_guide: wrote {guide} from {out / 'summary.json'}")
