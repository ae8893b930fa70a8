"""The import graph points one way (docs/architecture.md): core <- adapters <- layers <- dags <- trends.

Every import of every module is read with `ast`, including imports inside functions, so a lazy
import cannot hide an upward edge; importing our modules by a name in a string is refused too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = {"trendcore", "adapters", "speed", "batch", "serving", "dags", "trends"}
MAY_IMPORT = {
    "trendcore": {"trendcore"},
    "adapters": {"trendcore", "adapters"},
    "speed": {"trendcore", "adapters", "speed"},
    "batch": {"trendcore", "adapters", "batch"},
    "serving": {"trendcore", "adapters", "serving"},
    "dags": {"trendcore", "batch", "dags"},
    "trends": OURS,
}
IO_LIBRARIES = {"kafka", "confluent_kafka", "redis", "pyspark", "delta", "airflow", "fastapi", "granian"}
STRING_IMPORTS = {"import_module", "__import__", "find_spec"}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Top-level names of every module `path` imports (relative imports count as its own package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(path.relative_to(ROOT).parts[0] if node.level else (node.module or "").split(".")[0])
    return found


def _string_imports(path: Path) -> list[str]:
    """Calls that load one of our modules by a name in a string."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            target = node.args[0].value
            if name in STRING_IMPORTS and isinstance(target, str) and target.split(".")[0] in OURS:
                bad.append(f"{name}({target!r})")
    return bad


def test_each_package_imports_only_what_is_below_it():
    wrong = []
    for package, allowed in MAY_IMPORT.items():
        for path in _modules(package):
            for name in sorted((_imports(path) & OURS) - allowed):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_the_core_imports_no_io_library():
    wrong = [f"{p.relative_to(ROOT)} imports {name}"
             for p in _modules("trendcore") for name in sorted(_imports(p) & IO_LIBRARIES)]
    assert wrong == []


def test_no_module_of_ours_is_imported_by_a_name_in_a_string():
    wrong = [f"{p.relative_to(ROOT)}: {call}"
             for package in OURS for p in _modules(package) for call in _string_imports(p)]
    assert wrong == []


def test_the_checker_sees_an_upward_import(tmp_path):
    """The check can fail: a lazy import inside a function, and a string import, are both found."""
    module = tmp_path / "x.py"
    module.write_text("def f():\n    from trends.stack import procs\n    importlib.import_module('speed.cli')\n")
    assert "trends" in _imports(module)
    assert _string_imports(module) == ["import_module('speed.cli')"]
