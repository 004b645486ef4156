"""Each callback's Lightning docs example, as a Lightning user writes it, runs with only its imports changed."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from tests.lightning_port import port

SCRIPTS = Path(__file__).resolve().parent / "lightning_scripts"


@pytest.mark.parametrize("name", sorted(p.stem for p in SCRIPTS.glob("*.py")))
def test_lightning_script_runs_with_only_its_imports_changed(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (SCRIPTS / f"{name}.py").read_text().splitlines()
    ported = [port(line) for line in lines]
    changed = [(a, b) for a, b in zip(lines, ported) if a != b]
    assert changed and all(a.startswith("from lightning.pytorch") for a, _ in changed)  # import lines, nothing else
    assert not any("lightning" in line for line in ported if line.startswith(("from ", "import ")))
    script = tmp_path / f"{name}.py"
    script.write_text("\n".join(ported) + "\n")
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")  # each script asserts its own results
    if name == "model_summary":
        out = capsys.readouterr().out
        assert "0 | net   | Sequential  | 132 K  | train | 2.6 M  | [10, 256] | [10, 512]" in out  # Lightning's row
        assert "133 K     Trainable params" in out and "2.6 M     Total Flops" in out


def test_port_changes_import_lines_only() -> None:
    assert port("from lightning.pytorch import LightningModule, Trainer") == (
        "from trainer import Module as LightningModule, Trainer"
    )
    assert port("x = 'from lightning.pytorch import Trainer'") == "x = 'from lightning.pytorch import Trainer'"
