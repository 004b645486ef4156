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
    r"test_cli::(test_lightning_cli_print_config|test_lightning_cli_single_arg_callback)$": (
        "a configuration names steadytrain's classes (trainer.callbacks.DeviceStatsMonitor) and --print_config's "
        "header names steadytrain's version; Lightning's class paths are read as ours, not written back",
        "What differs: The CLI",
    ),
    r"test_cli::test_lightning_cli_ckpt_path_argument_hparams_subclass_mode$": (
        "a --ckpt_path checkpoint's hyper-parameters apply under the command line, so the --model class given there "
        "is built (Lightning replaces it with the checkpoint's subclass, and any flag with the checkpoint's value)",
        "What differs: The CLI",
    ),
    r"test_cli::test_cli_configure_optimizers_warning$": (
        "the CLI class is steadytrain's CLI (imported as LightningCLI): its warning names `CLI.configure_optimizers`",
        "What differs: The CLI",
    ),
    r"test_cli::test_tensorboard_logger_init_args$": (
        "TensorBoardLogger's keyword arguments for the SummaryWriter (comment=...) are not resolved by name on the "
        "command line: give them as --trainer.logger.dict_kwargs.comment",
        "What differs: The CLI",
    ),
    r"tuner\.test_lr_finder::test_lr_candidates_between_min_and_max$": (
        "lr_find refuses min_lr >= max_lr (the test passes them swapped): a falling rate shows nothing to suggest",
        "What differs: `lr_find` refuses a range that does not rise",
    ),
    r"core\.test_lightning_module::test_(fabric_\w+|grad_clipping_lm_fabric)|models\.test_fabric_integration::": (
        "a Module runs under steadytrain's Trainer; there is no Lightning Fabric to set it up",
        "What differs: A module runs under steadytrain's Trainer, not under Lightning Fabric",
    ),
    r"loops\.test_loops::test_fit_loop_save_and_restore_dataloaders\[<lambda>-False-batches_before0-": (
        "a loader with no batches (here train_dataloader() returns []) is an error naming it; Lightning warns and "
        "trains nothing, a run that looks finished",
        "What differs: An empty loader is an error",
    ),
    r"loops\.test_loops::test_workers_are_shutdown\[False-": (
        "without persistent_workers a pass's DataLoader workers end when the pass has run its batches; Lightning "
        "keeps them until the next epoch's iter() or the end of fit (the test counts each _shutdown_workers call)",
        "What differs: A pass's DataLoader workers end with the pass",
    ),
    r"models\.test_hooks::test_trainer_model_hook_system_fit": (
        "the hooks and loader requests come in Lightning's order, but the checkpoint dict that on_save_checkpoint and "
        "on_load_checkpoint get, which the test compares whole, is steadytrain's: it also holds what an exact resume "
        "needs (each rank's random state, the data position, the format and versions) and no "
        "pytorch-lightning_version",
        "What differs: Exact resume, and signals",
    ),
    r"connectors\.test_data_connector::test_replace_distributed_sampler\[": (
        "an evaluation loader is split across ranks by steadytrain's unpadded sampler (a custom batch sampler's whole "
        "batches are strided), not by a DistributedSampler, and one process keeps the user's sampler",
        "What differs: Evaluation under DDP is not padded",
    ),
    r"test_manual_optimization::test_manual_optimization_with_non_pytorch_scheduler\[True\]"
    r"|test_lightning_optimizer::test_lightning_optimizer_automatic_optimization_optimizer_step$": (
        "the test expects Lightning's own classes (Fabric's MisconfigurationException, its loops' Closure)",
        "What differs: Lightning's own classes stay Lightning's",
    ),
    r"checkpointing\.test_model_checkpoint::(test_checkpoint_repeated_strategy_extended|test_model_checkpoint_every_n_"
    r"epochs\[|test_none_monitor_not_alternating|test_val_check_interval_checkpoint_files"
    r"|test_model_checkpoint_with_non_string_input\[-1\]|test_model_checkpoint_topk_all|test_checkpoint_repeated_strategy$"
    r"|test_ckpt_version_after_rerun_new_trainer|test_resume_and_old_checkpoint_files_remain\[|test_default_checkpoint_"
    r"behavior|test_check_val_every_n_epochs_top_k_integration|test_current_score$)"
    r"|checkpointing\.test_trainer_checkpoint::test_finetuning_with_ckpt_path$"
    r"|trainer\.test_trainer::test_fit_ckpt_path_epoch_restored\[": (
        "ModelCheckpoint keeps last.ckpt by default (save_last=True), so a run that is killed or pre-empted always "
        "leaves a checkpoint to resume; the test lists a run's files without it",
        "What differs: Defaults",
    ),
    r"checkpointing\.test_model_checkpoint::(test_model_checkpoint_on_exception_parametrized\[TroubledModelOn(Fit|Train)"
    r"End\]|test_model_checkpoint_on_exception_in_other_callbacks\[TroubledCallbackOnFitEnd\])": (
        "save_last is on by default, so the end of training already wrote last.ckpt with that state; "
        "save_on_exception=True adds no second copy when on_train_end/on_fit_end then raises",
        "What differs: Defaults",
    ),
    r"checkpointing\.test_checkpoint_callback_frequency::test_top_k\[True-": (
        "with save_last=True, last.ckpt is a copy (a reflink where the filesystem has them) of the checkpoint just "
        "written, not a second torch.save of the same state; the test counts torch.save calls",
        "What differs: Defaults",
    ),
    r"callbacks\.test_timer::test_trainer_flag$": (
        "max_time= together with a Timer in callbacks= is an error naming both (two time limits: keep one); "
        "Lightning logs that it ignores max_time",
        "What differs: Flags",
    ),
    r"checkpointing\.test_model_checkpoint::test_ckpt_metric_names$": (
        "a ModelCheckpoint filename field that nobody logged is an error naming the values that were logged; "
        "Lightning writes 0 in its place (val_loss=0.00.ckpt), a name that misreports the checkpoint",
        "What differs: A checkpoint file name field nobody logged is an error",
    ),
    r"checkpointing\.test_model_checkpoint::test_load_with_inf_data_loader$": (
        "a mid-epoch resume continues exactly where the checkpoint was taken; an IterableDataset without "
        "state_dict/load_state_dict cannot be put there, so the resume is refused, naming what to add, where "
        "Lightning restarts the iterator",
        "What differs: Exact resume, and signals",
    ),
    r"trainer\.test_trainer::test_train_loop_system$|loops\.optimization\.test_closure::test_optimizer_step_no_closure_"
    r"raises$": (
        "automatic optimization runs training_step, zero_grad and backward, then optimizer.step() without a closure "
        "(a hand-written loop's order, which the captured CUDA-graph step replays), so an optimizer whose step "
        "ignores its closure still trains; LBFGS, an optimizer whose step requires a closure and an overridden "
        "optimizer_step get the closure",
        "What differs: The optimizer steps after the backward, not around it",
    ),
    r"models\.test_restore::test_restarting_mid_epoch_raises_warning\[\w+-True\]"
    r"|loops\.test_training_epoch_loop::test_resume_mid_epoch_warning$": (
        "a checkpoint saved inside an epoch resumes exactly (position, random state, workers), so there is no "
        "warning that resuming from it is unreliable",
        "What differs: Exact resume, and signals",
    ),
    r"models\.test_restore::test_fit_twice$": (
        "each fit() starts at epoch 0 unless ckpt_path says where to continue; Lightning's Trainer carries its "
        "loop's epoch count from one fit() call to the next",
        "What differs: Each fit starts from the beginning",
    ),
    # ---- loggers
    r"loggers\.test_comet::|loggers\.test_all::\w+\[CometLogger\]|test_cli::test_comet_logger_init_args$": (
        "Comet is not supported: CometLogger imports and raises MisconfigurationException naming the loggers to use",
        "What differs: Loggers",
    ),
    r"loggers\.test_litlogger::test_litlogger_": (
        "Lightning AI's hosted tracking is not supported: LitLogger imports and raises MisconfigurationException",
        "What differs: Loggers",
    ),
    r"loggers\.test_tensorboard::test_tensorboard_hparams_reload$|loggers\.test_wandb::test_wandb_log_model$": (
        "save_last is on by default: last.ckpt is kept (and uploaded by log_model) beside the best checkpoint",
        "What differs: Defaults",
    ),
    r"loggers\.test_wandb::test_wandb_logger_init$": (
        "WandbLogger makes the run id itself (wandb.init gets it, not None) so the run's folder is known before wandb "
        "starts",
        "What differs: Loggers",
    ),
    r"loggers\.test_wandb::(test_wandb_logger_dirs_creation|test_wandb_pickle)$": (
        "trainer.log_dir under WandbLogger is the run's own folder <save_dir>/<project>/<run id>, not save_dir",
        "What differs: Defaults",
    ),
    r"loggers\.test_wandb::test_wandb_logger_offline_log_model$": (
        "log_model with offline=True keeps the model artifacts in the offline run for wandb sync; Lightning refuses",
        "What differs: Loggers",
    ),
    r"loggers\.test_wandb::test_wandb_log_media$": (
        "a step's values go to wandb as one wandb.log call when the step is complete (flush), not one call each",
        "What differs: Loggers",
    ),
    r"loggers\.test_csv::test_csv_logger_remotefs$": (
        "CSVLogger writes to a local folder (it replaces metrics.csv by renaming a file); a URL is refused",
        "What differs: Loggers",
    ),
    r"loggers\.test_csv::test_append_metrics_file$": (
        "the test patches Lightning's private _ExperimentWriter._check_log_dir_exists to switch off the rule that "
        "starts a given version's metrics.csv over; steadytrain keeps that rule and has no private switch",
        "What differs: Runs that share a folder keep their own files",
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
        "a training CombinedLoader(mode='sequential') is refused as fit asks for its training loader (after the "
        "sanity check, before on_train_start), so trainer.num_training_batches is not counted yet (Lightning counts "
        "first and raises at the first epoch)",
        "What differs: mistakes in the training loaders fail before training starts",
    ),
    r"models\.test_hparams::test_collect_init_arguments\[AggSubClassBoringModel\]$": (
        "a hyper-parameter that is not plain data (here a loss module) is left out of the checkpoint, with a warning "
        "naming it, so the checkpoint loads with weights_only=True; load_from_checkpoint takes it again as a keyword",
        "What differs: Hyper-parameters are recorded without `save_hyperparameters()`",
    ),
    r"trainer\.test_trainer::test_checkpoint_path_input_last\[validate-False-last\]$": (
        "ckpt_path='last' means the newest complete checkpoint, so with save_last=False it loads the newest "
        "epoch=...ckpt rather than nothing",
        "What differs: Defaults",
    ),
    r"trainer\.connectors\.test_accelerator_connector::test_check_fsdp_strategy_and_fallback$": (
        "strategy='fsdp' also runs on CPU (gloo), so a sharded script can be tried on a laptop; Lightning refuses it",
        'What differs: `strategy="fsdp"` runs on CPU too',
    ),
    r"trainer\.logging_\.test_logger_connector::test_fx_validator_integration$": (
        "hooks a running stage calls directly (the batch-transfer hooks, lr_scheduler_step, on_save_checkpoint, "
        "on_validation_model_eval) are not told apart from the step: what they log counts as the step's, so the "
        "per-step path does no hook bookkeeping",
        "What differs: `self.log` in the hooks around a step",
    ),
    r"trainer\.connectors\.test_accelerator_connector::(test_accelerator_cpu_with_devices\[5-|test_set_devices_if_"
    r"none_cpu$)": (
        "devices=N on CPU starts N processes and is refused beyond the machine's cores, with an error naming the "
        "limit (a devices=64 meant for GPUs would start 64 CPU processes); Lightning starts them",
        "What differs: CPU processes are at most one per core",
    ),
    r"trainer\.test_trainer::test_spawn_predict_return_predictions$": (
        "under strategy='ddp_spawn' predict returns rank zero's predictions to the caller, as under 'ddp' (the "
        "spawned ranks send rank zero's result back); Lightning refuses return_predictions=True there",
        "What differs: `ddp_spawn` returns what the stage returns",
    ),
    r"test_fetchers::test_fetching_is_profiled$": (
        "profiler='simple' also writes its report to <log_dir>/<stage>-profiler.txt (the working directory when "
        "the test sets no logger and no default_root_dir), which the test's artifact check refuses",
        "What differs: the profiler report is also a file",
    ),
    r"trainer\.connectors\.test_callback_connector::test_configure_external_callbacks$": (
        "callbacks registered under Lightning's entry point (lightning.pytorch.callbacks_factory) are not loaded: "
        "packages built for Lightning return Lightning's callback objects, which would join every steadytrain run on "
        "a machine where such a package is installed; pass them in callbacks=[...]",
        "What differs: Callbacks come from `callbacks=`, not from entry points",
    ),
    r"checkpointing\.test_model_checkpoint::test_ckpt_version_after_rerun_same_trainer$": (
        "each fit() starts at epoch 0, so the second fit of the same Trainer saves four more versions of the one "
        "file name (test-v10 to test-v13) where Lightning's continues at epoch 2 and saves two",
        "What differs: Each fit starts from the beginning",
    ),
    r"checkpointing\.test_model_checkpoint::test_model_checkpoint_saveload_ckpt$": (
        "a ModelCheckpoint without dirpath that restores a checkpoint keeps writing to that run's checkpoint folder "
        "with its top-k and last.ckpt (a given dirpath that differs restores only best_model_path, as Lightning); "
        "and setup() claims the run's folder as it picks it",
        "What differs: Runs that share a folder keep their own files",
    ),
    r"checkpointing\.test_model_checkpoint::test_model_checkpoint_no_extraneous_invocations$": (
        "each checkpoint holds every rank's random state for an exact resume; gathering it pickles tensors, which "
        "torch does through torch.save on every rank; the test counts torch.save calls",
        "What differs: Exact resume, and signals",
    ),
    r"loggers\.test_wandb::test_wandb_log_model_with_score$": (
        "WandbLogger.finalize finishes the wandb run (the next stage continues it); the test's stand-in run has no "
        "finish(), as Lightning leaves the run open",
        "What differs: Loggers",
    ),
    r"trainer\.connectors\.test_checkpoint_connector::test_(ckpt_for_fsspec|local_cross_device_checkpoint)$": (
        "a URL (memory://, s3://) as default_root_dir is refused: run folders and checkpoints rest on exclusive "
        "creates and atomic renames that object stores do not give",
        "What differs: Runs and checkpoints are written to local folders",
    ),
    r"callbacks\.test_throughput_monitor::test_throughput_monitor_fit_with_validation$": (
        "a StopIteration a hook raises is an error, not the end of the data: Lightning's training loop ends the epoch "
        "quietly on it (the test's mocked clock runs out in the last validation's on_validation_start)",
        "What differs: A StopIteration from a hook is an error",
    ),
}

# Tests that reach Lightning's internals where no rule below can see it (outside the test function, or inside a
# spawned rank's traceback): test id regex -> what it reaches.
KNOWN_INTERNALS: dict[str, str] = {
    r"models\.test_hparams::test_args$": (
        "its module assigns Lightning's private self._hparams (SuperClassPositionalArgs) to pretend "
        "save_hyperparameters() ran"
    ),
    r"callbacks\.test_weight_averaging::test_ema_(ddp_spawn_cpu|resume_ddp)$": (
        "its callback reads trainer.fit_loop.restarting (Lightning's private _FitLoop) inside the spawned ranks"
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
PATCHED_PATH = re.compile(r"""patch(?:\.object|\.dict|\.multiple)?\(\s*["']lightning\.""")
# A private attribute patched on an object or module (``patch.object(callback, "_evaluate_stopping_criteria")``,
# ``monkeypatch.setattr(imports, "_RICH_AVAILABLE", False)``): the test switches Lightning's code path from inside.
PATCHED_PRIVATE = re.compile(r"""(?:patch\.object|patch\.multiple|monkeypatch\.setattr)\(\s*[\w.]+\s*,\s*["'](_\w+)""")
# A private class of Lightning's that the test builds or calls itself (``_DataLoaderSource(...)``).
# A private attribute set by hand on an object that is not the test's own class (``trainer._accelerator_connector.
# strategy = ...``, ``callback._run_early_stopping_check = Mock()``), or the strategy's state faked
# (``trainer.strategy.world_size = 2`` for ranks that never start).
SET_PRIVATE = re.compile(r"\b(?!self\b)\w+(?:\.\w+)*\.(_[a-z]\w*)(?:\.\w+)*\s*=(?!=)")
SET_STRATEGY = re.compile(r"\bstrategy\.(\w+)\s*=(?!=)")
PRIVATE_CLASS = re.compile(r"\b(_[A-Z][a-z]\w*)\(")
# conftest.py's fixtures that patch Lightning's device counts (cuda_count_2, mps_count_0, ...): a test using one
# runs on devices Lightning pretends to have, which steadytrain never sees.
# cuda_count_0/mps_count_0 pretend nothing (this CPU machine has no such device): a test using only those is a CPU
# test like any other.
MOCKED_DEVICES = re.compile(
    r"def \w+\([^)]*\b(?:cuda_count_[1-9]|mps_count_[1-9]|mock_cuda_count|mock_mps_count|xla_available"
    r"|tpu_available)\b"
)
# The same helpers called in a test's body: internals when the failure is about that device.
MOCK_CALL = re.compile(r"\bmock_(?:cuda|mps)_count\(|\bmock_xla_available\(")
DEVICE_ERROR = re.compile(r"(?i)\b(?:cuda|mps|xla|tpu)")
# conftest's fakes of a third-party package (mlflow_mock, wandb_mock, ...) hold only the modules Lightning's code
# imports from it; ours imports others ("'mlflow' is not a package", "from 'entities' (unknown location)").
FAKED_PACKAGE = re.compile(r"def \w+\([^)]*\b(\w+)_mock\b")
FAKE_IMPORT_ERROR = re.compile(r"is not a package|\(unknown location\)")
MISSING_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")
MISSING_ATTRIBUTE = re.compile(
    r"AttributeError: (?:type object )?'?(\w+)'? (?:object )?has no attribute '(\w+)'"
    r"|AttributeError: <[\w.]*?(\w+) object at \w+> does not have the attribute '(\w+)'"
)


def classify(test_id: str, text: str, test_file: Path) -> tuple[str, str]:
    """(class, reason) for a ported test that failed with ``text``."""
    for pattern, (reason, section) in DIFFERENCES.items():
        if re.search(pattern, test_id):
            return "difference", f"{reason} (migration guide: {section})"
    for pattern, reached in KNOWN_INTERNALS.items():
        if re.search(pattern, test_id):
            return "internals", reached
    faked = FAKED_PACKAGE.search(test_source(test_file, test_id).replace("\n", " "))
    if faked and FAKE_IMPORT_ERROR.search(text):
        return "internals", f"the test's {faked[1]}_mock fakes only the {faked[1]} modules Lightning's code imports"
    if match := MISSING_NAME.search(text):
        name, module = match.groups()
        return ("internals" if name.startswith("_") else "import"), f"{module}.{name}"
    if (match := MISSING_MODULE.search(text)) and ("ModuleNotFoundError" in text or "ImportError" in text):
        return "import", match[1]
    failing = failing_lines(text, test_file.name)
    if match := MISSING_ATTRIBUTE.search(text):
        owner, attribute = (group for group in match.groups() if group is not None)
        if attribute.startswith("_") or INTERNAL_NAMES.search(attribute) or owner.endswith("Loop"):
            return "internals", f"{owner}.{attribute}"  # Lightning's loops are private classes (_FitLoop, ...)
    if "/lightning/pytorch/" in text:
        return "internals", "Lightning's own code ran in the failing call (an internal the test imports)"
    if reason := _reaches_internals(test_source(test_file, test_id), failing, text, _read(test_file)):
        return "internals", reason
    return "public", last_error(text)


def _read(test_file: Path) -> str:
    try:
        return test_file.read_text()
    except OSError:
        return ""


def _reaches_internals(source: str, failing: str, text: str, file_text: str = "") -> str | None:
    """Why the failing line or the test's source reaches Lightning's internals, if it does (``file_text``: the
    whole test file, where the test's own private helper classes are defined)."""
    if reached := INTERNAL_NAMES.search(failing) or PRIVATE_ATTRIBUTE.search(failing):
        return f"the failing line reaches `{reached[0]}`"
    if CAPTURED_LOGGER.search(source):
        return "reads log records of Lightning's module loggers (caplog's logger='lightning....')"
    if PATCHED_PATH.search(source):
        return "patches a Lightning module path by string"
    if assigned := SET_PRIVATE.search(source):
        return f"sets a private attribute of Lightning's (`{assigned[1]}`)"
    if faked := SET_STRATEGY.search(source):
        return f"sets the strategy's `{faked[1]}` by hand (a stand-in for ranks that never start)"
    if patched := PATCHED_PRIVATE.search(source):
        return f"patches a private attribute of Lightning's (`{patched[1]}`)"
    own = set(re.findall(r"^\s*class (_\w+)", file_text, re.MULTILINE))
    if built := next((m[1] for m in PRIVATE_CLASS.finditer(source) if m[1] not in own), None):
        return f"uses Lightning's private class `{built}`"
    if MOCKED_DEVICES.search(source.replace("\n", " ")):
        return "runs on devices Lightning's fixtures pretend to have (cuda_count_N, mps_count_N, ...)"
    if MOCK_CALL.search(source) and DEVICE_ERROR.search(last_error(text)):
        return "runs on devices Lightning's mock_cuda_count/mock_mps_count pretend to have"
    return None


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
