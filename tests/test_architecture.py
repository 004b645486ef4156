"""The package's shape: layers whose imports point down, no import cycles, and loops that never ask which
strategy runs them."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trainer"

# ---- layers, lowest first --------------------------------------------------------------------------------
# A module imports, where the import runs, only modules of its own layer or of a lower one. Imports under
# ``if TYPE_CHECKING:`` never run and may point up: that is how the loops, callbacks and the module name the
# Trainer's type (``trainer.view``) while the Trainer imports them. An entry is a module, or a package with
# everything in it. No exceptions today; one would be listed here with its reason.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "foundations: stand alone",
        [
            "trainer.version",
            "trainer.failures",
            "trainer.signals",
            "trainer.worker_forks",
            "trainer.seed",
            "trainer.optim",
            "trainer.flags",
            "trainer.hparams",
            "trainer.saving",
            "trainer.results",
            "trainer.log_rules",
            "trainer.launch",
            "trainer.move",
            "trainer.lightning_paths",
            "trainer.overrides",
            "trainer.logo",
            "trainer.user_warnings",
            "trainer.states",
            "trainer.exceptions",
            "trainer.precision",
            "trainer.profilers",
            "trainer.view",
        ],
    ),
    (
        "files, processes and records",
        ["trainer.claims", "trainer.checkpoint", "trainer.supervise", "trainer.metric_log", "trainer.loggers"],
    ),
    ("devices and processes: the Strategy", ["trainer.strategies", "trainer.accelerators", "trainer.plugins"]),
    ("the user's code", ["trainer.module", "trainer.datamodule", "trainer.export"]),
    ("data: loaders, sharding, position, batches to the device", ["trainer.data"]),
    # The tuner's searches run from callbacks' hooks (BatchSizeFinder, LearningRateFinder), on Trainers they build
    # from the type of the one they are handed: they never import the Trainer or the loops.
    ("callbacks, and the tuner's searches they run", ["trainer.callbacks", "trainer.tuner"]),
    ("the captured step (cuda_graph=True)", ["trainer.graphs"]),
    ("loops", ["trainer.loops"]),
    ("the Trainer", ["trainer.trainer"]),
    ("around a Trainer: Lightning's utilities", ["trainer.utilities"]),
    ("Lightning's demo models and data", ["trainer.demos"]),
    ("entry points", ["trainer.cli", "trainer", "trainer.__main__"]),
]
EXCEPTIONS: dict[tuple[str, str], str] = {}  # (importer, imported) -> why it may point up


@dataclass(frozen=True)
class Import:
    module: str
    target: str
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``: read by the type checker, never run


def package_modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    return modules


def imports_in(module: str, source: str, modules: set[str]) -> list[Import]:
    """The package modules ``source`` imports, wherever the import stands (a function's body too):
    ``from a import b`` imports ``a.b`` where that is a module, else ``a``."""
    tree = ast.parse(source)
    type_only = {
        id(node)
        for guard in ast.walk(tree)
        if isinstance(guard, ast.If) and ast.unparse(guard.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for statement in guard.body
        for node in ast.walk(statement)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names
            ]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        found += [
            Import(module, t, node.lineno, id(node) in type_only) for t in targets if t in modules and t != module
        ]
    return found


def all_imports() -> list[Import]:
    modules = package_modules()
    return [i for name, path in modules.items() for i in imports_in(name, path.read_text(), set(modules))]


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    """Every module of the package and the modules of the package it imports where the import runs (with
    ``type_only``: also those it imports for the type checker alone)."""
    graph: dict[str, set[str]] = {name: set() for name in package_modules()}
    for i in all_imports():
        if type_only or not i.type_only:
            graph[i.module].add(i.target)
    return graph


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest entry that is ``module`` or a package holding it."""
    matches = [
        (len(entry), index)
        for index, (_, entries) in enumerate(LAYERS)
        for entry in entries
        if module == entry or (entry != "trainer" and module.startswith(entry + "."))
    ]
    if not matches:
        raise KeyError(f"{module} is in no layer: add it to LAYERS in tests/test_architecture.py")
    return max(matches)[1]


def imports_pointing_up(imports: list[Import]) -> list[str]:
    return [
        f"{i.module}:{i.line} imports {i.target} ({LAYERS[layer_of(i.target)][0]}), above its layer "
        f"({LAYERS[layer_of(i.module)][0]})"
        for i in imports
        if not i.type_only and layer_of(i.target) > layer_of(i.module) and (i.module, i.target) not in EXCEPTIONS
    ]


def test_every_module_has_a_layer() -> None:
    modules = package_modules()
    assert len(modules) > 40  # the walk found the package
    for module in modules:
        layer_of(module)  # raises for a module in no layer
    listed = [entry for _, entries in LAYERS for entry in entries]
    assert len(listed) == len(set(listed)) and set(listed) <= set(modules)


def test_imports_point_down_the_layers() -> None:
    assert imports_pointing_up(all_imports()) == []
    assert all(layer_of(a) > layer_of(b) for a, b in EXCEPTIONS)  # an exception that points down is stale


def test_the_layer_check_finds_an_import_that_points_up() -> None:
    modules = set(package_modules())
    planted = """
from typing import TYPE_CHECKING
import trainer.data
from trainer import failures
from trainer.callbacks.base import Callback
if TYPE_CHECKING:
    from trainer.trainer import Trainer
def move():
    from trainer.loops.batches import transfer
"""
    found = imports_pointing_up(imports_in("trainer.strategies.base", planted, modules))
    assert [line.split(" imports ")[1].split(" ")[0] for line in found] == [
        "trainer.data",
        "trainer.callbacks.base",
        "trainer.loops.batches",
    ]


def test_no_module_imports_itself_through_others() -> None:
    """No cycle among the imports that run. (Type-only imports may close one: ``trainer.view``.)"""
    assert cycles(import_graph()) == []


def test_only_the_view_names_the_trainer_below_it() -> None:
    """The code below the Trainer names its type through ``trainer.view`` alone: one import points up."""
    below = {
        i.module for i in all_imports() if i.target == "trainer.trainer" and layer_of(i.module) < layer_of(i.target)
    }
    assert below == {"trainer.view"}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_loops_callbacks_and_checkpoints_never_import_a_concrete_strategy() -> None:
    """A new strategy is one file: nothing that runs a loop may depend on DDP, DP or FSDP (not even for a type)."""
    graph = import_graph(type_only=True)
    concrete = {m for m in graph if m.startswith("trainer.strategies.") and not m.endswith((".base", ".single"))}
    concrete.discard("trainer.strategies.registry")
    for module, imported in graph.items():
        if module.startswith(("trainer.loops", "trainer.callbacks", "trainer.checkpoint")):
            assert not imported & concrete, f"{module} imports {sorted(imported & concrete)}"


# ---- the Strategy seam carries everything ---------------------------------------------------------
def strategy_blind_files() -> list[Path]:
    """The code that runs loops, builds checkpoints and calls callbacks: it may only talk to a Strategy."""
    return sorted(
        [
            *(PACKAGE / "loops").glob("*.py"),
            *(PACKAGE / "callbacks").glob("*.py"),
            PACKAGE / "checkpoint" / "state.py",
            PACKAGE / "checkpoint" / "elastic.py",
        ]
    )


def seam_violations(source: str) -> list[str]:
    """What in ``source`` goes around the Strategy: torch.distributed, a concrete strategy's module, or a
    question about which strategy runs (isinstance/type checks, comparing its name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names]
            module = node.module if isinstance(node, ast.ImportFrom) and node.module else ""
            targets = [module, *(f"{module}.{n}" for n in names)] if module else names
            bad = [t for t in targets if _distributed(t) or _concrete_strategy(t)]
            found += [f"line {line}: imports {bad[-1]}"] if bad else []
        elif isinstance(node, ast.Attribute) and ast.unparse(node) == "torch.distributed":
            found.append(f"line {line}: uses torch.distributed")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("isinstance", "issubclass"):
            if "strateg" in ast.unparse(node).lower():
                found.append(f"line {line}: asks which strategy runs: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare) and any(_names_the_strategy(s) for s in [node.left, *node.comparators]):
            found.append(f"line {line}: asks which strategy runs: {ast.unparse(node)}")
    return found


def _names_the_strategy(node: ast.expr) -> bool:
    """``strategy.name`` or ``type(strategy)``: a comparison with either picks out one strategy.
    (``type(strategy).__name__`` in a profiler's label is not a decision, so it is allowed.)"""
    text = ast.unparse(node).lower()
    named = isinstance(node, ast.Attribute) and node.attr == "name"
    typed = isinstance(node, ast.Call) and ast.unparse(node.func) == "type"
    return (named or typed) and "strateg" in text


def _distributed(module: str) -> bool:
    return module == "torch.distributed" or module.startswith("torch.distributed.")


def _concrete_strategy(module: str) -> bool:
    return module.startswith("trainer.strategies.") and module.split(".")[2] in ("ddp", "dp", "fsdp")


def test_loops_callbacks_and_checkpoint_state_go_through_the_strategy() -> None:
    files = strategy_blind_files()
    assert len(files) > 20
    problems = [f"{p.relative_to(PACKAGE.parent)} {v}" for p in files for v in seam_violations(p.read_text())]
    assert problems == []


def test_the_seam_check_finds_each_way_around_the_strategy() -> None:
    planted = """
import torch.distributed as dist
from torch.distributed import all_reduce
from torch import distributed
from trainer.strategies.ddp import DDPStrategy
from trainer.strategies import fsdp
torch.distributed.barrier()
if isinstance(trainer.strategy, DDPStrategy): pass
if type(self.strategy) is X: pass
if trainer.strategy.name == "dp": pass
"""
    lines = sorted(int(v.split(":")[0].removeprefix("line ")) for v in seam_violations(planted))
    assert lines == list(range(2, 11))  # each line once
    assert seam_violations("strategy.barrier()\nif trainer.world_size > 1: pass\nname == 'x'") == []


def test_dp_does_not_need_ddp() -> None:
    """DataParallel runs in one process: loading it must not pull in DDP (and torch.distributed with it)."""
    graph = import_graph(type_only=True)
    assert "trainer.strategies.ddp" not in graph["trainer.strategies.dp"]
    assert "trainer.strategies.ddp" not in graph["trainer.strategies.step_wrapper"]


# ---- the Trainer's attributes: trainer.py sets them, these others read them -----------------------------
# Who else may set one, and why. (``ckpt_path`` and ``state`` are not here: ``trainer.state``'s own methods
# change it, and ``ckpt_path`` is read from it.)
TRAINER_WRITERS: dict[str, tuple[str, ...]] = {
    "should_stop": ("trainer/",),  # Lightning's: a callback or the module asks the fit to stop
    "accumulate_grad_batches": ("trainer/callbacks/gradient_accumulation.py",),  # Lightning's scheduler sets it
    # The resolved CLI config, for checkpoints and loggers: known only once the Trainer is built (it is the dump
    # of what built it), and as a Trainer argument it would be a --trainer.config flag no Lightning user knows.
    "config": ("trainer/cli/core.py",),
}
TRAINER_WRITERS_ANYTHING = ("trainer/trainer.py",)


def _is_a_trainer(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return text == "trainer" or text.endswith((".trainer", "._trainer"))


def _unpacked(targets: list[ast.expr]) -> list[ast.expr]:
    """``a, (b, *c) = ...`` assigns a, b and c."""
    flat = []
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            flat += _unpacked(target.elts)
        else:
            flat.append(target.value if isinstance(target, ast.Starred) else target)
    return flat


def _assignments(source: str) -> Iterator[tuple[ast.expr, int]]:
    """Every target ``source`` assigns to (``a.b = ``, ``a, (b, *c) = ``, ``x += ``, ``x: T = ``), with its line."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            yield from ((target, node.lineno) for target in _unpacked(list(targets)))


def _setattrs(source: str) -> Iterator[ast.Call]:
    """Every ``setattr(obj, ...)`` call in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr" and node.args:
            yield node


def trainer_writes(source: str) -> list[tuple[str, int]]:
    """``(attribute, line)`` for each Trainer attribute ``source`` sets: ``trainer.x = ...``, ``trainer.x[k] = ...``
    (also as ``self.trainer`` / ``pl_module.trainer``), or ``setattr(trainer, ...)``."""
    found = []
    for target, line in _assignments(source):
        inner = target.value if isinstance(target, ast.Subscript) else target
        if isinstance(inner, ast.Attribute) and _is_a_trainer(inner.value):
            found.append((inner.attr, line))
    return found + [("setattr", call.lineno) for call in _setattrs(source) if _is_a_trainer(call.args[0])]


def test_only_the_trainer_sets_its_attributes() -> None:
    """The code below the Trainer types it as the Trainer itself (``trainer.view``): this keeps it read-only."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE.parent).as_posix()
        if where in TRAINER_WRITERS_ANYTHING:
            continue
        for attr, line in trainer_writes(path.read_text()):
            if not where.startswith(TRAINER_WRITERS.get(attr, ("<nobody>",))):
                problems.append(f"{where}:{line} sets trainer.{attr}")
    assert problems == []


def test_the_writer_check_finds_each_way_to_set_a_trainer_attribute() -> None:
    planted = """
trainer.max_epochs = 3
self.trainer.limits["train"] = 2
pl_module.trainer.loggers[:] = []
trainer.global_step += 1
setattr(trainer, "max_steps", 5)
a, trainer.seed = 1, 2
trainer.fit_loop.progress.epoch = 1
x = trainer.max_epochs
"""
    assert sorted(line for _, line in trainer_writes(planted)) == [2, 3, 4, 5, 6, 7]


# ---- the training step has one owner, Progress one writer ---------------------------------------------
def _outer_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module-level functions and methods (nested functions stay inside their owner)."""
    bodies = [tree.body, *(n.body for n in tree.body if isinstance(n, ast.ClassDef))]
    return [n for body in bodies for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def optimizer_step_sites(source: str, name: str) -> set[str]:
    """The functions of ``source`` that step an optimizer: ``<optimizer>.step`` or ``<precision>.optimizer_step``,
    called or taken as a bound method, as ``name:function``."""
    sites = set()
    for function in _outer_functions(ast.parse(source)):
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute):
                owner = ast.unparse(node.value).lower()
                if (node.attr == "step" and "optim" in owner) or (
                    node.attr == "optimizer_step" and "precision" in owner
                ):
                    sites.add(f"{name}:{function.name}")
    return sites


def test_the_loops_step_an_optimizer_in_one_place() -> None:
    """Automatic (plain, hooked, closure) and manual optimization all step through ``TrainingStep._stepper``."""
    sites = set()
    for path in sorted((PACKAGE / "loops").glob("*.py")):
        sites |= optimizer_step_sites(path.read_text(), path.name)
    assert sites == {"step.py:_stepper"}


PROGRESS_FIELDS = {"epoch", "batches_done", "total_batches", "global_step", "validations", "validated_at",
                   "closed_at", "epoch_finished", "loader_offset"}  # fmt: skip


def progress_writes(source: str) -> list[str]:
    """Where ``source`` writes a Progress counter: an assignment to one of its fields (``epoch`` only through a
    name that says progress, as other objects have epochs), ``setattr`` on a progress, or a new ``progress``."""
    found = []
    for target, line in _assignments(source):
        if not isinstance(target, ast.Attribute):
            continue
        through_progress = "progress" in ast.unparse(target.value).lower()
        field = target.attr in PROGRESS_FIELDS and (target.attr != "epoch" or through_progress)
        if field or (target.attr == "progress" and ast.unparse(target.value) != "self"):
            found.append(f"line {line}: {ast.unparse(target)}")
    calls = [call for call in _setattrs(source) if "progress" in ast.unparse(call.args[0]).lower()]
    return found + [f"line {call.lineno}: {ast.unparse(call)}" for call in calls]


def test_progress_is_written_only_by_its_own_methods() -> None:
    """Everything else calls ``Progress``'s methods (the fit loop and the step) or reads it."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != PACKAGE / "loops" / "progress.py":
            problems += [f"{path.relative_to(PACKAGE.parent)} {w}" for w in progress_writes(path.read_text())]
    assert problems == []


def test_global_step_grows_in_one_place() -> None:
    """One increment, in ``Progress.count_step``, called once: by the step's after-step."""
    tree = ast.parse((PACKAGE / "loops" / "progress.py").read_text())
    writers = [
        f.name for f in _outer_functions(tree) if any("global_step" in w for w in progress_writes(ast.unparse(f)))
    ]
    assert writers == ["count_step"]
    callers = [p.name for p in sorted(PACKAGE.rglob("*.py")) if ".count_step()" in p.read_text()]
    assert callers == ["step.py"] and (PACKAGE / "loops" / "step.py").read_text().count(".count_step()") == 1


def test_the_writer_checks_find_a_second_writer() -> None:
    planted = """
def f(trainer, progress, opt, precision):
    trainer.fit_loop.progress.epoch += 1
    progress.batches_done = 0
    self.progress.global_step, x = 3, 4
    setattr(trainer.fit_loop.progress, "epoch", 2)
    trainer.fit_loop.progress = None
    opt.step()
    precision.optimizer_step(opt)
"""
    lines = sorted(int(w.split(":")[0].removeprefix("line ")) for w in progress_writes(planted))
    assert lines == [3, 4, 5, 6, 7]
    assert progress_writes("scheduler.last_epoch = 3\nself.epoch = 1\nself.progress = Progress()") == []
    assert optimizer_step_sites(planted, "x.py") == {"x.py:f"}
    assert optimizer_step_sites("def g(module):\n    module.optimizer_step(0, 0, opt)", "y.py") == set()


# ---- what the Trainer is doing, and what was logged: each written by its owner's methods ----------------------
STATE_FIELDS = {"fn", "stage", "ckpt_path"}


def state_writes(source: str) -> list[str]:
    """Where ``source`` writes a ``TrainerState`` field (through a name that says state: ``trainer.state.stage``), or
    ``setattr`` on a state."""
    found = [
        f"line {line}: {ast.unparse(target)}"
        for target, line in _assignments(source)
        if isinstance(target, ast.Attribute)
        and target.attr in STATE_FIELDS
        and "state" in ast.unparse(target.value).lower()
    ]
    calls = [call for call in _setattrs(source) if ast.unparse(call.args[0]).lower().endswith("state")]
    return found + [f"line {call.lineno}: {ast.unparse(call)}" for call in calls]


def test_the_trainer_state_is_written_only_by_its_own_methods() -> None:
    """``stage``, ``fn`` and ``ckpt_path`` change only in ``TrainerState``'s methods (``trainer/states.py``),
    which the lifecycle, the fit's validation and the stages that load a checkpoint call; the Trainer makes its
    one ``TrainerState`` once and never replaces it."""
    owner = PACKAGE / "states.py"
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != owner:
            problems += [f"{path.relative_to(PACKAGE.parent)} {w}" for w in state_writes(path.read_text())]
    assert problems == []
    trainer_py = ast.parse((PACKAGE / "trainer.py").read_text())
    made = [
        n for n in ast.walk(trainer_py) if isinstance(n, ast.Assign) and "self.state" in map(ast.unparse, n.targets)
    ]
    assert len(made) == 1


METRIC_LOG_FIELDS = {"callback_metrics", "logged_metrics", "progress_bar_keys", "results"}
MUTATORS = {"update", "clear", "pop", "popitem", "setdefault", "add", "discard", "remove", "__setitem__"}
RESULTS_BATCH_WRITERS = ("trainer/loops/training_batch.py", "trainer/loops/evaluation.py")  # the per-batch fast path
METRIC_LOG_WRITERS = {  # who else may change a MetricLog field, and why
    "trainer/callbacks/lr_monitor.py": "Lightning's LearningRateMonitor adds its rates to trainer.callback_metrics",
}


def metric_log_writes(source: str, results_fields: set[str]) -> list[tuple[str, int]]:
    """``(field, line)`` for each write ``source`` makes into a MetricLog (``metric_log.results = ...``,
    ``x.callback_metrics[k] = ...``, ``x.callback_metrics.update(...)``) or a Results field (through a name that
    says results: ``results.epoch_end = True``)."""
    found = []
    for target, line in _assignments(source):
        inner = target.value if isinstance(target, ast.Subscript) else target
        if not isinstance(inner, ast.Attribute):
            continue
        owner = ast.unparse(inner.value)
        into_log = inner.attr in METRIC_LOG_FIELDS and ("metric_log" in owner or isinstance(target, ast.Subscript))
        if into_log or (inner.attr in results_fields and owner.lower().endswith("results")):
            found.append((inner.attr, line))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            changed = node.func.value
            if isinstance(changed, ast.Attribute) and changed.attr in METRIC_LOG_FIELDS - {"results"}:
                found.append((changed.attr, node.lineno))
    return found


def test_logged_values_are_written_by_the_metric_log() -> None:
    """``callback_metrics``, ``logged_metrics``, the progress bar's names and the collection ``self.log`` writes
    into change in ``metric_log.py`` and ``results.py`` alone (the loops call their methods: ``start``, ``step_end``,
    ``use_loader``, ``start_epoch_end``, ...), but for the listed writers and ``Results.batch``, which the loops set
    per batch by a plain store (a method call there would cost every step)."""
    from dataclasses import fields

    from trainer.results import Results

    results_fields = {f.name for f in fields(Results)} - {"_lock"}
    owners = {PACKAGE / "metric_log.py", PACKAGE / "results.py"}
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE.parent).as_posix()
        if path in owners or where in METRIC_LOG_WRITERS:
            continue
        for field, line in metric_log_writes(path.read_text(), results_fields):
            if not (field == "batch" and where in RESULTS_BATCH_WRITERS):
                problems.append(f"{where}:{line} writes {field}")
    assert problems == []


def test_the_owner_checks_find_a_second_writer() -> None:
    planted = """
trainer.state.stage = "validate"
self.trainer.state.fn, x = None, 1
setattr(trainer.state, "ckpt_path", "a.ckpt")
trainer.metric_log.results = None
trainer.callback_metrics["loss"] = t
trainer.metric_log.callback_metrics.update(values)
results.epoch_end = True
trainer.metric_log.results.dataloader_idx = 0
self.stage = "test"
state = None
x = trainer.metric_log.results.batch
"""
    assert sorted(int(w.split(":")[0].removeprefix("line ")) for w in state_writes(planted)) == [2, 3, 4]
    found = metric_log_writes(planted, {"epoch_end", "dataloader_idx", "batch"})
    assert sorted(line for _, line in found) == [5, 6, 7, 8, 9]
