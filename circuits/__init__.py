"""Circuits: which parts of a model do a task, as graphs.

- Edge discovery: ``circuits.graph`` (``CircuitGraph``, the edge index; ``Subgraph``, the one result type),
  ``circuits.counterfactual`` (prompt sets with corrupted twins), ``circuits.intervene`` (masked forwards),
  ``circuits.edges`` (edge scorers: EAP, EAP-IG, DPA, path patching; the method table),
  ``circuits.evaluate`` (faithfulness), ``circuits.discover`` (the one call behind ``wb.circuit``),
  ``circuits.feature_graph`` (SAE-feature graphs), ``circuits.plot``.
- ``circuits.bench``: the circuit-discovery benchmark (tasks, metrics, known circuits, runner, report).
- ``circuits.tools``: node-level tools on any ``core.models.hooked.HookedModel`` (toy or LLM): patching,
  ablation, DLA, composition, attention patterns, weight spectra, Fourier.
- ``circuits.toy``: the toy zoo: tasks with known solutions, toy-model builders, training, the shipped
  checkpoints in ``data/models/<name>/``, their counterfactual prompts and the seed papers' findings.
"""
