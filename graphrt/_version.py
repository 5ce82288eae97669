"""graphrt's version, in a module of its own so that any subpackage can import it."""

__version__ = "0.1.0"
