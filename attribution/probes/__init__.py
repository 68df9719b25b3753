"""Probes, geometry and concept vectors: reading what a model represents, layer by layer.

- activations: pooled activations (last, mean or a marked token) at any hook, for a labelled set
- probe: layer-wise logistic / ridge probes, control task, selectivity, bootstrap intervals
- geometry: GDV, RSA across layers and models, PCA / t-SNE projections
- concepts: class-mean, probe-weight and SAE concept vectors, their cosines, steering
- icl_readout: layer-wise read-out of the in-context regression model against classical solvers
"""
