"""How wattlab starts Python on one of its own modules: never with the current folder first.

``python -m MODULE`` puts the current folder first on ``sys.path``. A folder there named
``wattlab`` that is not the package (the clone's own folder, seen from its parent, or any
``wattlab/`` beside the user's scripts) then becomes a namespace package that shadows the
installed one, and the child fails on its first ``from wattlab import ...``. ``python -P``
(Python 3.11) would leave the folder out, but wattlab runs on 3.10 too, so the child is
started with ``-c``, whose first path entry (``''``, the current folder) the code removes
before it runs the module as ``-m`` would (``runpy.run_module``, ``__main__``, ``sys.argv[0]``
the module's file). Every other entry (``PYTHONPATH``, site-packages, an editable install)
stays as it was.
"""

from __future__ import annotations

import sys

# ``python -c CODE MODULE ARGS...``: sys.argv is ['-c', MODULE, ARGS...]
RUN_MODULE_CODE = (
    "import runpy, sys\n"
    "if sys.path and sys.path[0] == '':\n"
    "    del sys.path[0]\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)


def module_argv(module: str, *args: str, flags: tuple[str, ...] = ()) -> list[str]:
    """The argv that runs ``python [flags] -m module *args`` with this interpreter, without the
    current folder on the import path."""
    return [sys.executable, *flags, "-c", RUN_MODULE_CODE, module, *args]
