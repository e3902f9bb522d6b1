"""Dependencies point one way: no import circle in `infra/` or `components/`, no payload that
reaches pulumi, and no layer below the command line that imports `infra/cli/`.

Read from the import statements themselves (`ast`), so an import inside a function or under
`TYPE_CHECKING` counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("components", "infra")


@dataclass(frozen=True)
class Import:
    """One imported name as a statement of `module` writes it."""

    target: str
    """The project module it resolves to, or the external top-level name (`pulumi`)."""
    line: int
    type_only: bool
    """Under `if TYPE_CHECKING:`: never runs."""
    optional: bool = False
    """In a `try:` whose `except ImportError` does without it."""


def module_name(path: Path, root: Path) -> str:
    """`components/payloads/verify.py` → `components.payloads.verify`."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the packages under `root`, by dotted name."""
    return {
        module_name(path, root): path
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    }


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    for handler in node.handlers:
        caught = handler.type
        members = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if any(isinstance(m, ast.Name) and m.id in names for m in members):
            return True
    return False


Statements = Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]


def _statements(tree: ast.AST) -> Statements:
    """Every import statement, anywhere in the tree, whether only a type checker runs it, and
    whether the module does without it."""

    def walk(node: ast.AST, type_only: bool, optional: bool) -> Statements:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only, optional
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for guarded in node.body:
                yield from walk(guarded, True, optional)
            for unguarded in node.orelse:
                yield from walk(unguarded, type_only, optional)
            return
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for statement in node.body:
                yield from walk(statement, type_only, True)
            for other in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from walk(other, type_only, optional)
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child, type_only, optional)

    yield from walk(tree, False, False)


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree (parsed once: the graph and the sys.path check read the same
    files)."""
    return ast.parse(path.read_text(), str(path))


def imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """What module `name` (at `path`) imports: project modules by name, others by top name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    for statement, type_only, optional in _statements(parsed(path)):
        if isinstance(statement, ast.Import):
            targets = [alias.name for alias in statement.names]
        else:
            base = statement.module or ""
            if statement.level:
                anchor = package.split(".")[: len(package.split(".")) - statement.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import module` imports that module; `from module import name`, it.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in statement.names
            ]
        for target in targets:
            # `import a.b.c` of a project module names it; of anything else, its distribution.
            resolved = target if target in modules else target.split(".")[0]
            found.append(Import(resolved, statement.lineno, type_only, optional))
    return found


def import_graph(root: Path) -> dict[str, list[Import]]:
    """Each project module's imports."""
    modules = project_modules(root)
    return {name: imports(name, path, modules) for name, path in modules.items()}


def import_circles(graph: dict[str, list[Import]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for edge in graph[node]:
            if edge.target not in graph:
                continue
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in on_stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or any(e.target == node for e in graph[node]):
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def parents(name: str) -> list[str]:
    """The packages whose `__init__` runs before a module: `a.b.c` → `a`, `a.b`."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def path_to(graph: dict[str, list[Import]], start: str, external: str) -> list[str] | None:
    """The chain of runtime imports by which `start` reaches the distribution `external`
    (a package's `__init__` counts: Python runs it before the module), or None."""
    came_from: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        steps = [e.target for e in graph[node] if not e.type_only]
        steps += parents(node)
        for step in steps:
            if step == external:
                chain = [step, node]
                back = came_from[node]
                while back is not None:
                    chain.append(back)
                    back = came_from[back]
                return chain[::-1]
            if step in graph and step not in came_from:
                came_from[step] = node
                queue.append(step)
    return None


def payloads(graph: dict[str, list[Import]]) -> list[str]:
    """The payload modules (stdlib-only scripts shipped into pods and hosts)."""
    return [name for name in graph if name.startswith("components.payloads.")]


FORBIDDEN_IN_PAYLOADS = ("pulumi", "pulumi_kubernetes", "pulumi_command", "pydantic")


def payloads_reaching_forbidden(graph: dict[str, list[Import]]) -> dict[str, list[str]]:
    """`payload -> distribution`: the import chain, for each payload that reaches one."""
    return {
        f"{name} -> {external}": chain
        for name in payloads(graph)
        for external in FORBIDDEN_IN_PAYLOADS
        if (chain := path_to(graph, name, external)) is not None
    }


def payload_imports_outside_stdlib(graph: dict[str, list[Import]]) -> list[str]:
    """`module:line: name` for each runtime import of a payload that is neither the standard
    library nor another payload (an optional one, with its fallback, is allowed)."""
    allowed = {*sys.stdlib_module_names, "__future__", "components.payloads", *payloads(graph)}
    return [
        f"{name}:{edge.line}: {edge.target}"
        for name in payloads(graph)
        for edge in graph[name]
        if not (edge.type_only or edge.optional) and edge.target not in allowed
    ]


def command_line_importers(graph: dict[str, list[Import]]) -> list[str]:
    """`module:line: infra.cli...` for each module outside `infra/cli/` that imports it."""

    def in_cli(name: str) -> bool:
        return name == "infra.cli" or name.startswith("infra.cli.")

    return [
        f"{name}:{edge.line}: {edge.target}"
        for name, edges in graph.items()
        if not in_cli(name)
        for edge in edges
        if in_cli(edge.target)
    ]


LAYERS: tuple[tuple[str, ...], ...] = (
    ("infra.cli",),
    ("infra.__main__", "infra.tune_kubernetes"),
    ("infra.program",),
    ("infra.targets", "infra.targets.registry"),
    ("infra.targets.kubernetes_target", "infra.targets.docker_host_target",
     "infra.targets.fleet_target"),
    ("infra.targets.target", "infra.reference"),
    ("infra.new_stack_text", "infra.new_stack_docker_host", "infra.targets.cluster"),
    ("infra.new_stack", "infra.targets.kubernetes", "infra.targets.docker_host",
     "infra.component_users"),
    ("infra.plan", "infra.tune", "infra.render", "infra.render_diff", "infra.render_cache",
     "infra.targets.litellm"),
    ("infra.lock",),
    ("infra.lock_resolve", "infra.lock_source", "infra.render_out", "infra.hub"),
    ("infra.lock_format",),
    ("infra.config",),
    ("infra.devices", "infra.cpus", "infra.boxes", "infra.user_cache", "infra.hub_client"),
    ("infra",),
    ("components", "components.provider"),
    ("components.llamacpp", "components.vllm"),
    ("components.model_store", "components.monitoring"),
    ("components.k8s",),
    (
        "components.grammars", "components.extra_args", "components.provider_server",
        "components.validation", "components.validation_docs",
        "components.validation_annotations", "components.validation_problems",
        "components.gguf_header", "components.images", "components.llama_archs",
        "components.addresses", "components.field_docs", "components.option_categories",
    ),
    ("components.payloads",),
)  # fmt: skip
"""The layers of the project, top first: a module imports from its own layer and those below,
never from one above. The command line over the program, the table of targets over each target's
module, those over the protocol, the reference pages and init's drafts, over the wiring of each
target, over the plan, the lock, the stack models and the hardware tables; under all of `infra/`
the components: the servers build on the store and the monitoring, those on the generic
Kubernetes pieces, those on the input grammars and checks, and all of them ship the payloads.
A module belongs to the layer of the longest name here that is it or its package; every module
is in one (`infra` alone is its package's `__init__`)."""


def layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The index (0 = top) of the layer `module` belongs to, or None outside every layer."""
    best: tuple[int, int] | None = None
    for index, names in enumerate(layers):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (
                best is None or len(name) > best[1]
            ):
                best = (index, len(name))
    return None if best is None else best[0]


def climbs(graph: dict[str, list[Import]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """`module:line: target` for each import of a module from a layer above its own."""
    found = []
    for name, edges in graph.items():
        own = layer_of(name, layers)
        for edge in edges:
            target = layer_of(edge.target, layers)
            if own is not None and target is not None and target < own:
                found.append(f"{name}:{edge.line}: {edge.target}")
    return found


SYS_PATH = re.compile(r"\bsys\s*\.\s*path\b")


def sys_path_edits(root: Path, folders: tuple[str, ...]) -> list[str]:
    """`file:line` of every statement that changes `sys.path` (insert, append, extend, assign,
    slice-assign): modules are imported by name, from the checkout's root or the installed
    package, never found by editing the path."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if not SYS_PATH.search(path.read_text()):
                continue  # no `sys.path` anywhere in its text: nothing to parse for
            for node in ast.walk(parsed(path)):
                target: ast.expr | None = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    target = node.func.value
                elif isinstance(node, ast.Assign | ast.AugAssign):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    target = next(
                        (t.value if isinstance(t, ast.Subscript) else t for t in targets), None
                    )
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == "path"
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "sys"
                ):
                    found.append(f"{path.relative_to(root)}:{target.lineno}")
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, list[Import]]:
    """The project's import graph, built once for the module's tests (not at collection)."""
    return import_graph(ROOT)


def test_the_project_has_no_import_circle(graph: dict[str, list[Import]]) -> None:
    assert import_circles(graph) == []


def test_no_payload_reaches_pulumi_or_pydantic(graph: dict[str, list[Import]]) -> None:
    assert "components.payloads.verify" in payloads(graph)
    assert payloads_reaching_forbidden(graph) == {}


def test_the_payloads_import_only_the_standard_library_and_each_other(
    graph: dict[str, list[Import]],
) -> None:
    assert payload_imports_outside_stdlib(graph) == []


def test_no_layer_below_the_command_line_imports_it(graph: dict[str, list[Import]]) -> None:
    assert command_line_importers(graph) == []


def test_no_import_climbs_to_a_higher_layer(graph: dict[str, list[Import]]) -> None:
    assert [name for name in graph if layer_of(name, LAYERS) is None] == []
    assert climbs(graph, LAYERS) == []


PATH_EDITS = {
    # Pulumi starts a policy pack as a script from its folder, in the pack's own venv where the
    # project may not be installed: the pack's entry point is the one place that sets the path.
    "policy/__main__.py",
}


def test_nothing_edits_sys_path() -> None:
    folders = (*PACKAGES, "bench", "tests", "policy", "provider")
    edits = sys_path_edits(ROOT, folders)
    assert [e for e in edits if e.split(":")[0] not in PATH_EDITS] == []
    assert {e.split(":")[0] for e in edits} == PATH_EDITS, "an allowed edit is gone: drop it"


# The checks above would pass on a checker that finds nothing: each is shown to fire here on a
# small tree written for it.


def write_tree(root: Path, files: dict[str, str]) -> dict[str, list[Import]]:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_graph(root)


def test_a_circle_through_a_function_local_or_type_checking_import_is_found(
    tmp_path: Path,
) -> None:
    graph = write_tree(
        tmp_path,
        {
            "infra/__init__.py": "",
            "infra/a.py": "from infra import b\n",
            "infra/b.py": "def f():\n    from infra.c import x\n",
            "infra/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from . import a\nx = 1\n",
            "components/__init__.py": "",
            "components/d.py": "import infra.a\n",
        },
    )
    assert import_circles(graph) == [["infra.a", "infra.b", "infra.c"]]


PAYLOAD_TREE = {
    "infra/__init__.py": "",
    "components/__init__.py": "import typing\nif typing.TYPE_CHECKING:\n    import pulumi\n",
    "components/payloads/__init__.py": "",
    "components/payloads/clean.py": "import json\n",
    "components/payloads/bad.py": "from components.payloads import helper\n",
    "components/payloads/helper.py": "def f():\n    from components.k8s.children import x\n",
    "components/k8s/__init__.py": "",
    "components/k8s/children.py": "import pulumi_kubernetes as k8s\nx = 1\n",
}


def test_a_payload_reaching_pulumi_through_a_sibling_is_found(tmp_path: Path) -> None:
    graph = write_tree(tmp_path, PAYLOAD_TREE)
    assert path_to(graph, "components.payloads.clean", "pulumi") is None
    assert path_to(graph, "components.payloads.bad", "pulumi_kubernetes") == [
        "components.payloads.bad",
        "components.payloads.helper",
        "components.k8s.children",
        "pulumi_kubernetes",
    ]
    assert set(payloads_reaching_forbidden(graph)) == {
        "components.payloads.bad -> pulumi_kubernetes",
        "components.payloads.helper -> pulumi_kubernetes",
    }


def test_a_payload_reaching_pulumi_through_its_package_init_is_found(tmp_path: Path) -> None:
    graph = write_tree(tmp_path, {**PAYLOAD_TREE, "components/__init__.py": "import pulumi\n"})
    assert path_to(graph, "components.payloads.clean", "pulumi") == [
        "components.payloads.clean",
        "components",
        "pulumi",
    ]


def test_a_third_party_payload_import_and_a_command_line_import_below_it_are_found(
    tmp_path: Path,
) -> None:
    graph = write_tree(
        tmp_path,
        {
            **PAYLOAD_TREE,
            "components/payloads/clean.py": "import json\ntry:\n    import yaml\n"
            "except ImportError:\n    yaml = None\n",
            "components/payloads/uses_yaml.py": "import yaml\n",
            "infra/cli/__init__.py": "",
            "infra/cli/docs.py": "from infra.cli import common\n",
            "infra/cli/common.py": "",
            "infra/reference.py": "from infra.cli.common import x\n",
        },
    )
    assert sorted(payload_imports_outside_stdlib(graph)) == [
        "components.payloads.helper:2: components.k8s.children",
        "components.payloads.uses_yaml:1: yaml",
    ]
    assert command_line_importers(graph) == ["infra.reference:1: infra.cli.common"]


def test_a_sys_path_edit_is_found(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "a.py").write_text(
        "import sys\nsys.path.insert(0, '.')\nprint(sys.path)\n"
    )
    (tmp_path / "bench" / "b.py").write_text("import sys\n\nsys.path[:0] = ['bench']\n")
    assert sys_path_edits(tmp_path, ("bench",)) == ["bench/a.py:2", "bench/b.py:3"]


def test_an_import_from_a_higher_layer_is_found(tmp_path: Path) -> None:
    graph = write_tree(
        tmp_path,
        {
            "components/__init__.py": "",
            "components/k8s/__init__.py": "",
            "components/k8s/helper.py": "def f():\n    from components.llamacpp.server import x\n",
            "components/llamacpp/__init__.py": "",
            "components/llamacpp/server.py": "from components.k8s.helper import f\nx = 1\n",
        },
    )
    assert climbs(graph, LAYERS) == ["components.k8s.helper:2: components.llamacpp.server"]
