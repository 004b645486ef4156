"""Why a Lightning test that passes under Lightning fails ported: the classes of benchmarks/lightning_tests.py.

``classify`` reads the failure (message and short traceback) and the test's own source; ``DIFFERENCES`` lists
the tests that show a difference steadytrain keeps on purpose, each with its reason and the place in
docs/migration/from-lightning.md that says so.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

# test id (a regex on "module.Class::test_name[params]") -> (reason, the migration guide's section)
DIFFERENCES: dict[str, tuple[str, str]] = {
    r"tuner\.test_lr_finder::test_lr_candidates_between_min_and_max$": (
        "lr_find refuses min_lr >= max_lr (the test passes them swapped): a falling rate shows nothing to suggest",
        "What differs: `lr_find` refuses a range that does not rise",
    ),
    r"(?:test_fetchers::test_(?:(?:training_step|step_methods|stop_iteration)_with_dataloader_iter"
    r"|fetching_dataloader_iter_(?:opt|running_stages))"
    r"|test_(?:training_epoch|evaluation)_loop::test_\w+_loop_dataloader_iter_multiple_dataloaders"
    r"|test_prediction_loop::test_prediction_loop_with_iterable_dataset$)": (
        "a step taking `dataloader_iter` is refused with a clear error: the loop fetches every batch itself to count "
        "it for an exact resume and to honour the batch limits",
        "What differs: steps take a batch, not `dataloader_iter`",
    ),
    r"test_dataloaders::test_fit_multiple_train_loaders\[sequential-": (
        "a training CombinedLoader(mode='sequential') is refused once fit has its loaders, before on_fit_start, so "
        "trainer.num_training_batches is not counted yet (Lightning counts first and raises at the first epoch)",
        "What differs: mistakes in the training loaders fail before training starts",
    ),
    r"test_fetchers::test_fetching_is_profiled$": (
        "profiler='simple' also writes its report to <log_dir>/<stage>-profiler.txt (the working directory when "
        "the test sets no logger and no default_root_dir), which the test's artifact check refuses",
        "What differs: the profiler report is also a file",
    ),
}

# Lightning's internals a test can reach: its loops and connectors, private names, module paths patched by string.
INTERNAL_NAMES = re.compile(
    r"\b(?:fit_loop|epoch_loop|val_loop|validate_loop|test_loop|predict_loop|batch_progress|optim_progress"
    r"|epoch_progress|automatic_optimization\._|_logger_connector|_accelerator_connector|_checkpoint_connector"
    r"|_data_connector|_callback_connector|_signal_connector|_results|_active_loop|_evaluation_loop"
    r"|_call_\w+_hook|_run_stage|_run\b|strategy\.connect|_launcher|_lightning_optimizers|_fabric\w*"
    r"|_current_fx_name|_metric_attributes|_device_type|_accelerator_flag|_precision_flag|_strategy_flag)\b"
)
PRIVATE_ATTRIBUTE = re.compile(
    r"\b(?:trainer|model|module|strategy|callback|cb|logger|pl_module|lightning_module"
    r"|self\.trainer|accelerator|precision_plugin|profiler)\._[a-z]\w*"
)
CAPTURED_LOGGER = re.compile(r"""logger=["']lightning\.""")
PATCHED_PATH = re.compile(r"""patch(?:\.object|\.dict)?\(\s*["']lightning\.""")
# conftest.py's fixtures that patch Lightning's device counts (cuda_count_2, mps_count_0, ...): a test using one
# runs on devices Lightning pretends to have, which steadytrain never sees.
MOCKED_DEVICES = re.compile(
    r"def \w+\([^)]*\b(?:cuda_count_\d|mps_count_\d|mock_cuda_count|mock_mps_count|xla_available"
    r"|tpu_available)\b"
)
MISSING_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
MISSING_ATTRIBUTE = re.compile(r"AttributeError: '?(\w+)'? object has no attribute '(\w+)'")


def classify(test_id: str, text: str, test_file: Path) -> tuple[str, str]:
    """(class, reason) for a ported test that failed with ``text``."""
    for pattern, (reason, section) in DIFFERENCES.items():
        if re.search(pattern, test_id):
            return "difference", f"{reason} (migration guide: {section})"
    if match := MISSING_NAME.search(text):
        name, module = match.groups()
        return ("internals" if name.startswith("_") else "import"), f"{module}.{name}"
    if (match := MISSING_MODULE.search(text)) and ("ModuleNotFoundError" in text or "ImportError" in text):
        return "import", match[1]
    failing = failing_lines(text, test_file.name)
    if match := MISSING_ATTRIBUTE.search(text):
        owner, attribute = match.groups()
        if attribute.startswith("_") or INTERNAL_NAMES.search(attribute):
            return "internals", f"{owner}.{attribute}"
    if "/lightning/pytorch/" in text:
        return "internals", "Lightning's own code ran in the failing call (an internal the test imports)"
    source = test_source(test_file, test_id)
    if reached := INTERNAL_NAMES.search(failing) or PRIVATE_ATTRIBUTE.search(failing):
        return "internals", f"the failing line reaches `{reached[0]}`"
    if CAPTURED_LOGGER.search(source):
        return "internals", "reads log records of Lightning's module loggers (caplog's logger='lightning....')"
    if PATCHED_PATH.search(source):
        return "internals", "patches a Lightning module path by string"
    if MOCKED_DEVICES.search(source.replace("\n", " ")):
        return "internals", "runs on devices Lightning's fixtures pretend to have (cuda_count_N, mps_count_N, ...)"
    return "public", last_error(text)


def failing_lines(text: str, file_name: str) -> str:
    """The code lines of the traceback's frames in the test file itself, with the error lines."""
    lines = text.splitlines()
    kept = []
    for i, line in enumerate(lines):
        if file_name in line and i + 1 < len(lines):
            kept.append(lines[i + 1])
        if line.startswith("E "):
            kept.append(line)
    return "\n".join(kept)


def last_error(text: str) -> str:
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    first = text.splitlines()[0] if text else ""
    return (errors[0] if errors else first)[:240]


def test_source(test_file: Path, test_id: str) -> str:
    """The test function's source with its decorators (empty when it cannot be found)."""
    name = test_id.split("::")[-1].split("[")[0]
    try:
        tree = ast.parse(test_file.read_text())
    except (OSError, SyntaxError):
        return ""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            return "\n".join(test_file.read_text().splitlines()[start : node.end_lineno])
    return ""
