"""The model layer: the hooked model wrappers engines see, and where their weights come from.

``hooked`` (HookedModel, the one interface), ``backends`` / ``remote`` (TransformerLens, TransformerBridge, nnsight),
``vit`` (HookedViT, the vision wrapper) with ``vit_hf`` (local Hugging Face ViT, DeiT, CLIP and DINOv2 folders),
``dinov2`` (DINOv2-small from its ONNX package) and ``vit_heads`` (linear and saliency heads), ``toy`` (the toy
zoo's models, with ``moe`` and ``vector_embed``), ``files`` (model folders on disk), ``arch`` (architecture facts),
``families`` (the LLM families and their configs), ``hub`` (Hugging Face models by name), ``llm`` / ``gemma`` /
``convert`` / ``prepare`` (built-in weights converted once into the cache), ``zoo`` (what can be loaded), ``tokens``
(tokenization rules), ``decode`` (generation). Nothing here imports torch at package import time; each module pays
for its own imports.
"""
