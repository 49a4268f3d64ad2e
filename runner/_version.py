"""The package version, in a module of its own so that any layer can read it without importing the package."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the daemon's client reads this module
if TYPE_CHECKING:
    from typing import Final

__version__: Final = "0.1.0"
