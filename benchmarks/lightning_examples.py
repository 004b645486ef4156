"""Lightning's own example scripts, run as a user would: under Lightning, then with only their import lines
ported to steadytrain (tests/lightning_port.py), same seed, on the CPU, on synthetic data of the real shapes.

    PYTHONPATH=. python benchmarks/lightning_examples.py --lightning PATH [--work DIR] [names...]

``PATH`` is a checkout of Lightning's repository (its ``examples/pytorch``); nothing of it is copied into
this project: each script is copied to a run folder under ``--work`` (a temporary folder by default). The
interpreter running this needs torch, torchvision, Pillow, lightning and steadytrain. Each script runs with
its own flags to keep it short; where a script has none for that (or hard-codes ``accelerator="gpu"``), the
Trainer arguments forced on both sides are listed. What each run reports is recorded by
tests/lightning_parity_site and compared by tests/lightning_parity.py (each framework's own default logger,
TensorBoard here, with the scalars of its event files). Prints one row per example.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.example_data import place
from tests.lightning_parity import compare
from tests.lightning_parity import normalized as normalized_report
from tests.lightning_port import port

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "benchmarks" / "lightning_examples_site"
SHORT = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "4", "--trainer.limit_val_batches", "2"]
CPU = ["--trainer.accelerator", "cpu"]


@dataclass
class Example:
    script: str  # under examples/pytorch
    args: list[str]
    data: list[tuple[str, str]] = field(default_factory=list)  # (synthetic set, where in the run folder)
    forced: dict[str, Any] = field(default_factory=dict)  # Trainer arguments forced on both sides
    env: dict[str, str] = field(default_factory=dict)


EXAMPLES = {
    "autoencoder": Example(
        "basics/autoencoder.py",
        [*SHORT, *CPU, "--trainer.limit_test_batches", "2", "--trainer.limit_predict_batches", "2"],
        [("mnist", "examples/Datasets"), ("mnist", "data")],  # Lightning's MNIST() also checks ./data
    ),
    "backbone_image_classifier": Example(
        "basics/backbone_image_classifier.py",
        [*SHORT, *CPU, "--trainer.limit_test_batches", "2", "--trainer.limit_predict_batches", "2"],
        [("mnist", "examples/Datasets"), ("mnist", "data")],  # Lightning's MNIST() also checks ./data
    ),
    "profiler_example": Example(
        "basics/profiler_example.py",
        [*CPU, "--trainer.limit_train_batches", "3", "--trainer.limit_val_batches", "2"],
        [("cifar10", "examples/Datasets"), ("weights", "torch_home")],
        env={"EXAMPLE_CIFAR10_STANDIN": "1"},
    ),
    "transformer": Example("basics/transformer.py", [], [("wikitext2", ".")]),
    "bug_report_model": Example("bug_report/bug_report_model.py", []),
    "computer_vision_fine_tuning": Example(
        "domain_templates/computer_vision_fine_tuning.py",
        [
            "fit",
            "--trainer.max_epochs",
            "3",
            *SHORT[2:],
            *CPU,
            "--data.batch_size",
            "4",
            "--finetuning.milestones",
            "[1,2]",
        ],
        [("cats_and_dogs", "."), ("weights", "torch_home")],
    ),
    "generative_adversarial_net": Example(
        "domain_templates/generative_adversarial_net.py",
        [],
        [("mnist", "data")],
        forced={"accelerator": "cpu", "max_epochs": 2, "limit_train_batches": 4},
    ),
    "imagenet": Example(
        "domain_templates/imagenet.py",
        # logger=False: the checkpoints go to default_root_dir, the working folder in Lightning and "runs" here
        # (a documented difference, docs/migration/from-lightning.md): set on both sides to compare the rest
        [
            *("fit", *SHORT, *CPU, "--trainer.default_root_dir", ".", "--model.data_path", "imagenet"),
            *("--model.batch_size", "4", "--model.workers", "0"),
        ],
        [("imagenet", ".")],
    ),
    "semantic_segmentation": Example(
        "domain_templates/semantic_segmentation.py",
        ["--data_path", "Kitti", "--batch_size", "2", "--num_layers", "3"],
        [("kitti", ".")],
        forced={"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1},
    ),
}


def ported(source: str) -> str:
    """The script with each import line ported, and nothing else changed."""
    return "\n".join(port(line) for line in source.splitlines()) + "\n"


def run(name: str, framework: str, lightning: Path, work: Path, cache: Path) -> tuple[dict[str, Any] | None, str]:
    """One run: (what it reported, or None if it failed; the output's tail)."""
    example = EXAMPLES[name]
    folder = work / framework / name
    script = folder / "examples" / "pytorch" / example.script
    shutil.rmtree(folder, ignore_errors=True)
    script.parent.mkdir(parents=True)
    source = (lightning / "examples" / "pytorch" / example.script).read_text()
    script.write_text(source if framework == "lightning" else ported(source))
    for what, where in example.data:
        place(cache, what, folder / where)
    out = folder / "report.json"
    env = {
        **os.environ,
        **example.env,
        "PARITY_FRAMEWORK": framework,
        "PARITY_OUT": str(out),
        "PARITY_SCRIPT": str(script),
        "PARITY_DEFAULT_LOGGER": "native",
        "EXAMPLE_TRAINER_OVERRIDES": json.dumps(example.forced),
        "PYTHONPATH": os.pathsep.join([str(SITE), str(REPO)]),
        "TORCH_HOME": str(folder / "torch_home"),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(script), *example.args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1800,
        check=False,
    )
    (folder / "output.txt").write_text(done.stdout)
    if done.returncode != 0 or not out.exists():
        return None, done.stdout[-2000:]
    report: dict[str, Any] = json.loads(out.read_text())
    report["files"] = {k: v for k, v in report["files"].items() if not _ours_or_data(k)}
    return normalized_report(report), done.stdout[-2000:]


def _ours_or_data(path: str) -> bool:
    """The harness's own files and the synthetic inputs, in both run folders alike: not compared."""
    return path.startswith(("examples/", "torch_home/", "data/", "imagenet/", "Kitti/")) or path in (
        "report.json",
        "output.txt",
    )


def last_error(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return (errors or lines or ["(no output)"])[-1].strip()[:150]


def row(name: str, lightning: Path, work: Path, cache: Path, show: int) -> str:
    theirs, their_output = run(name, "lightning", lightning, work, cache)
    ours, our_output = run(name, "steadytrain", lightning, work, cache)
    if theirs is None:
        if ours is None and last_error(their_output).split(": ", 1)[-1][:60] in our_output:
            return f"{name:<28} both fail alike: {last_error(their_output)}"
        mine = "runs" if ours is not None else f"fails: {last_error(our_output)}"
        return f"{name:<28} Lightning fails: {last_error(their_output)}\n    steadytrain {mine}"
    if ours is None:
        return f"{name:<28} steadytrain fails: {last_error(our_output)}"
    found = compare(ours, theirs)
    lines = [f"{name:<28} {'match' if not found else f'{len(found)} differences'}"]
    return "\n".join(lines + [f"    {line[:200]}" for line in found[:show]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lightning", type=Path, required=True, help="a checkout of Lightning's repository")
    parser.add_argument("--work", type=Path, default=None, help="run folders (default: a temporary folder)")
    parser.add_argument("--show", type=int, default=4, help="differences shown per example")
    parser.add_argument("--append", action="append", default=[], help="one more argument for every script")
    parser.add_argument("names", nargs="*", default=list(EXAMPLES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        cache = work / "synthetic"
        print(f"{'example':<28} result (Lightning {_version()} vs steadytrain, imports ported; CPU, synthetic data)")
        for name in args.names:
            EXAMPLES[name].args += args.append
            forced = EXAMPLES[name].forced
            print(row(name, args.lightning, work, cache, args.show), flush=True)
            if forced:
                print(f"    (Trainer arguments forced on both sides: {forced})", flush=True)


def _version() -> str:
    from importlib.metadata import version

    return version("lightning")


if __name__ == "__main__":
    main()
