"""The model layer: the hooked model wrappers engines see, and where their weights come from.

``hooked`` (HookedModel, the one interface), ``backends`` / ``remote`` (TransformerLens, TransformerBridge, nnsight),
``arch`` (architecture facts), ``families`` (the LLM families and their configs), ``hub`` (Hugging Face models by
name), ``llm`` / ``gemma`` / ``convert`` / ``prepare`` (built-in weights converted once into the cache), ``zoo`` (what
can be loaded), ``tokens`` (tokenization rules), ``decode`` (generation). Nothing here imports torch at package
import time; each module pays for its own imports.
"""

from workbench.callable_package import make_callable


def _no_facade() -> None:
    raise TypeError("workbench.models() is the facade's table of the zoo: import workbench first")


# ``wb.models()`` (the zoo as a table) and this package are one name (workbench/callable_package.py)
make_callable(__name__, "_models_facade", _no_facade)
