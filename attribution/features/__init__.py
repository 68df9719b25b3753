"""Features as units of circuit inspection: feature-level DPA (scores.py), the feature graph across
dictionaries (graph.py) and the feature-level faithfulness curve (faithfulness.py)."""
