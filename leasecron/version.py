"""The version of leasecron: the package's ``__version__``, and what a started instance announces."""

__all__ = ["__version__"]

#: This release's version (PEP 440).
__version__ = "0.3.0"
