"""No two host modules import each other, directly or through others (imports made only for
type checkers aside), except the pair listed with its reason: a module that needs another's
code to be changed with it is one module, or a missing third.
"""

from __future__ import annotations

import grimp

ALLOWED = {
    # A worker process runs lifecycle.worker_entry before importing anything of aviso's (its
    # stop handling must be in place first), which then imports the worker; serving, the
    # worker asks lifecycle whether a stop signal came. Both imports are inside functions.
    frozenset({"aviso_host.lifecycle", "aviso_host.worker"}),
}


def test_no_import_cycle_in_the_host() -> None:
    graph = grimp.build_graph("aviso_host", cache_dir=None, exclude_type_checking_imports=True)
    cycles = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.add(frozenset({module, imported}))
    assert cycles - ALLOWED == set(), sorted(sorted(pair) for pair in cycles - ALLOWED)
