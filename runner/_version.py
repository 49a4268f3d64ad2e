"""The package version, in a module of its own so that any layer can read it without importing the package."""

from typing import Final

__version__: Final = "0.1.0"
