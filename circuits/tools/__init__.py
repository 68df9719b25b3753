"""Circuit tools. Each works on any ``core.models.hooked.HookedModel`` (toy or LLM) through
TransformerLens hook names; grouped-query models are handled through ``HookedModel.weights``
(kv heads repeated) and per-query-head ``hook_z`` / ``hook_pattern``."""
