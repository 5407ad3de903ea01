"""Exits 1, naming them, when modules of the package import each other, directly or through others: every import
counts, a function's deferred one too (only those under TYPE_CHECKING do not). A cycle makes the order modules are
imported in matter, and two modules that need each other are one module's job. import-linter's contracts cannot
say this of a package and its own modules (`loadrepro.records` and `loadrepro.records.tally`), so it is checked
here.

    python scripts/import_cycles.py
"""

from __future__ import annotations

import sys


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (strongly connected components of
    more than one module, or a module importing itself), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(imports.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1 or module in imports.get(module, ()):
                found.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def main() -> int:
    import grimp

    graph = grimp.build_graph("loadrepro", exclude_type_checking_imports=True)
    found = cycles({m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules})
    for group in found:
        print("imports itself through others: " + " -> ".join(group), file=sys.stderr)
    print(f"import cycles: {len(found)} among {len(graph.modules)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
