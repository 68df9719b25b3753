"""Sparse autoencoders: an offline text corpus, activation caches, SAELens training, metrics and
per-feature dashboard data. Heavy imports (torch, SAELens) happen inside the functions."""
