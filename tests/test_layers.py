"""The package's layers import one way: each module imports only from its own layer and the
layers before it (function-level imports included), as elmo_plugin/__init__.py states."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import elmo_plugin
from tests.helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "elmo_plugin"
# data -> cpu -> modules -> training -> elmo_files -> models -> archives
# -> token_embedders | predictors | commands
LAYERS = {
    "data": 0,
    "cpu": 1,
    "modules": 2,
    "training": 3,
    "elmo_files": 4,
    "models": 5,
    "archives": 6,
    "token_embedders": 7,
    "predictors": 7,
    "commands": 7,
}


def our_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported elmo_plugin module) for every import statement anywhere in the file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("elmo_plugin")
        ):
            for alias in node.names:  # `from elmo_plugin.x import y` may import the module x.y
                yield node.lineno, f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("elmo_plugin"):
                    yield node.lineno, alias.name


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""


def test_every_subpackage_has_a_layer():
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert subpackages == set(LAYERS)
    assert (
        "data -> cpu -> modules -> training -> elmo_files -> models -> archives"
        in elmo_plugin.__doc__
    )


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.glob("*/*.py")), ids=lambda path: f"{path.parent.name}/{path.name}"
)
def test_module_imports_only_its_layer_and_those_before_it(path):
    own = path.parent.name
    for line, module in our_imports(path):
        target = layer_of(module)
        assert target, f"{path}:{line} imports {module}, which is in no layer"
        if LAYERS[target] == LAYERS[own]:
            assert target == own, f"{path}:{line}: {own} imports its peer layer {target} ({module})"
        assert LAYERS[target] <= LAYERS[own], (
            f"{path}:{line}: {own} imports the later layer {target} ({module})"
        )


def test_the_checker_sees_function_level_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from elmo_plugin.archives.bilm_archive import load_bilm_model\n"
    )
    assert list(our_imports(module)) == [(2, "elmo_plugin.archives.bilm_archive.load_bilm_model")]
