"""The model layer: the hooked model wrappers engines see, and where their weights come from.

``hooked`` (HookedModel, the one interface), ``backends`` / ``remote`` (TransformerLens, TransformerBridge, nnsight),
``arch`` (architecture facts), ``families`` (the LLM families and their configs), ``hub`` (Hugging Face models by
name), ``llm`` / ``gemma`` / ``convert`` / ``prepare`` (built-in weights converted once into the cache), ``zoo`` (what
can be loaded), ``tokens`` (tokenization rules), ``decode`` (generation). Nothing here imports torch at package
import time; each module pays for its own imports.
"""
