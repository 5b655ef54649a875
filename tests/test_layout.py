"""The folders are the architecture: each layer imports only the layers below it, with no cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import REPO

PACKAGE = REPO / "transformer"
# The one source of the layers: what each folder of the package may import besides itself, each only layers
# listed before it (transformer/__init__.py and docs/layout.md point here).
ALLOWED = {
    "model": set(),
    "text": set(),
    "decoding": {"model", "text"},
    "analysis": {"model", "text", "decoding"},
    "io": {"model", "text", "decoding", "analysis"},
    "hugging_face": {"model", "text", "decoding", "io"},
    "viz": {"model", "text", "decoding", "analysis"},
    "training": {"model", "text", "decoding", "analysis", "io"},
    "toolkits": {"model", "text", "decoding", "io", "hugging_face"},
    "cli": {"model", "text", "decoding", "analysis", "io", "hugging_face", "toolkits", "viz", "training"},
}


def imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth of its code (lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def package_modules() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def test_plotly_only_in_viz_and_streamlit_only_in_the_app():
    for path in [*PACKAGE.rglob("*.py")]:
        top = {name.split(".")[0] for name in imports(path)}
        if "plotly" in top:
            assert module_name(path).startswith("transformer.viz"), path
        assert "streamlit" not in top, path
    # They drive the app from outside: its protocol's messages, or Streamlit's AppTest as the tests do, at most
    # (benchmarks/apps/ holds the Streamlit pages they start as baselines, apps of their own).
    for path in (REPO / "benchmarks").rglob("*.py"):
        if "apps" in path.relative_to(REPO).parts:
            continue
        used = {name for name in imports(path) if name.split(".")[0] == "streamlit"}
        assert all(name.startswith(("streamlit.proto.", "streamlit.testing.")) for name in used), path


def test_each_layer_imports_only_the_layers_below_it():
    for module, names in package_modules().items():
        parts = module.split(".")
        if len(parts) < 3:  # transformer and transformer.__main__ sit on top
            continue
        used = {name.split(".")[1] for name in names if name.startswith("transformer.")} - {parts[1]}
        assert used <= ALLOWED[parts[1]], f"{module} imports {sorted(used - ALLOWED[parts[1]])}"


# The app's rooms in the same way (docs/layout.md): what each room of ui/ may import of the others. State first;
# services answer and never draw; players and widgets draw, side by side; the server serves them all.
UI_ALLOWED = {
    "state": set(),
    "services": {"state"},
    "players": {"state", "services"},
    "widgets": {"state", "services"},
    "server": {"state", "services", "players", "widgets"},
}


def test_each_room_of_the_app_imports_only_the_rooms_below_it():
    for path in (REPO / "ui").rglob("*.py"):
        parts = module_name(path).split(".")
        if len(parts) < 3:
            continue
        used = {name.split(".")[1] for name in imports(path) if name.startswith("ui.")} - {parts[1]}
        assert used <= UI_ALLOWED[parts[1]], f"{module_name(path)} imports {sorted(used - UI_ALLOWED[parts[1]])}"


def test_no_import_cycle_between_modules():
    graph = {module: {n for n in names if n.startswith("transformer.")} for module, names in package_modules().items()}
    assert_acyclic(graph)


def assert_acyclic(graph: dict[str, set[str]]) -> None:
    graph = {module: {n for n in targets if n in graph and n != module} for module, targets in graph.items()}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in graph[module]:
            assert state.get(target) != "open", " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [])


def test_the_tests_import_nothing_from_the_benchmarks():
    """Benchmarks reuse the tests' fixtures (tests/fixtures), never the reverse."""
    for path in (REPO / "tests").rglob("*.py"):
        assert not any(name.split(".")[0] == "benchmarks" for name in imports(path)), path


def test_no_import_cycle_between_benchmarks():
    graph = {}
    for path in (REPO / "benchmarks").rglob("*.py"):
        found, package = set(), module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(f"{package}.{node.module}" if node.level else node.module)
        graph[module_name(path)] = found
    assert_acyclic(graph)


def test_the_formatter_formats_nearly_everything():
    """`ruff format` formats; `# fmt: skip` is for aligned tables of data only, never a call or an assertion (372
    hand-wrapped lines bypassed it, and 14 more on calls and asserts)."""
    sources = [
        REPO / "app.py",
        *(p for top in ("pages", "ui", "transformer", "tests", "benchmarks") for p in (REPO / top).rglob("*.py")),
    ]
    skips = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "# fmt: skip" in line
    ]
    assert len(skips) < 20, skips


def source_files(*tops: str) -> list[Path]:
    return [path for top in tops for path in (REPO / top).rglob("*.py") if "artifacts" not in path.parts]


def test_no_module_past_400_lines_and_no_function_past_60():
    """A module past ~300 lines or a function past ~50 asks to be split (docs/layout.md); these are the hard limits
    (cli.py was 575 lines, train() 187)."""
    long_modules, long_functions = [], []
    for path in source_files("transformer", "ui", "pages"):
        text = path.read_text()
        if text.count("\n") > 400:
            long_modules.append(f"{path.relative_to(REPO)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                long_functions.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert not long_modules and not long_functions, long_modules + long_functions


JS_FUNCTION = re.compile(r"(\s*)(?:export default )?function\b.*\{$")


def js_function_lengths(text: str) -> list[tuple[int, int]]:
    """(first line, lines) of each function of a browser script, nested ones too: from `function ... {` to the
    `}` at its indentation (the scripts' own layout, which the players keep)."""
    lines = text.splitlines()
    found = []
    for number, line in enumerate(lines):
        if match := JS_FUNCTION.fullmatch(line):
            end = next(i for i in range(number + 1, len(lines)) if lines[i] == f"{match[1]}}}")
            found.append((number + 1, end - number))
    return found


def test_each_page_is_named_sections_and_one_call():
    """A page's script holds imports, constants and named functions, and runs one line: `page(frame.draw(__file__))`
    (attribution.py ran 265 lines at top level, where the 60-line rule never saw it)."""
    for path in (REPO / "pages").glob("*.py"):
        body = ast.parse(path.read_text()).body
        calls = [
            ast.unparse(node)
            for node in body
            if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant)
        ]
        others = [
            node.lineno
            for node in body
            if not isinstance(
                node,
                ast.Import
                | ast.ImportFrom
                | ast.Assign
                | ast.AugAssign
                | ast.AnnAssign
                | ast.FunctionDef
                | ast.ClassDef
                | ast.Expr,
            )
        ]
        assert calls == ["page(frame.draw(__file__))"] and not others, (path.name, calls, others)


def test_the_browser_scripts_hold_to_the_same_limits():
    """The players' scripts had escaped the rules: step_player.js at 431 lines, a function of 198."""
    long = []
    for path in (REPO / "ui").rglob("*.js"):
        text = path.read_text()
        if text.count("\n") > 400:
            long.append(f"{path.relative_to(REPO)}: {text.count(chr(10))} lines")
        long += [
            f"{path.relative_to(REPO)}:{at} {lines} lines" for at, lines in js_function_lengths(text) if lines >= 60
        ]
    assert js_function_lengths("function a() {\n  function b() {\n  }\n}\n") == [(1, 3), (2, 1)]
    assert not long, long


def test_no_folder_outside_pages_holds_more_than_ten_modules():
    """A flat folder past ~10 modules asks to be grouped: its job is several (ui/ held 19, tests/ 43). A package's
    __init__ is its door, not a module (its __main__ is one: a command's code)."""
    crowded = []
    for top in ("transformer", "ui", "tests", "benchmarks"):
        for folder in [REPO / top, *(p for p in (REPO / top).rglob("*") if p.is_dir())]:
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if len(modules) > 10:
                crowded.append(f"{folder.relative_to(REPO)}: {len(modules)}")
    assert not crowded, crowded


def test_the_layout_document_names_every_module():
    """docs/layout.md is where a newcomer finds a module's job: a module it does not name has none written down."""
    written = (REPO / "docs" / "layout.md").read_text()
    unnamed = [
        str(path.relative_to(REPO))
        for path in source_files("transformer", "ui", "benchmarks", "tests/fixtures")
        if path.name != "__init__.py" and path.stem not in written
    ]
    assert not unnamed, unnamed
