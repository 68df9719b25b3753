"""The ground every engine stands on: the hooked model wrappers (``core.models``), the run store (``store``), errors,
argument and file checks, options, paths, the figure writer, prompt files, progress. Nothing here imports from
``attribution``, ``circuits``, ``workbench`` or ``app``."""
