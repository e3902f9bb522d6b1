"""Import one file as a module by path (standard library only).

For a file outside any package (the Python example program, as `pulumi up` runs it); the
packages' own modules and bench's are imported by name (``components/__init__`` is lazy: the
payloads need no pulumi).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(name: str, path: Path) -> ModuleType:
    """The file at ``path`` as module ``name`` (once: a second call returns the same module)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
