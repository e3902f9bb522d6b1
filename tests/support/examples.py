"""The Python example program, loaded as a module."""

from types import ModuleType

from tests.conftest import ROOT
from tests.support.modules import load_file


def python_example() -> ModuleType:
    return load_file("example", EXAMPLES / "python-k3s" / "example.py")


EXAMPLES = ROOT / "examples"
