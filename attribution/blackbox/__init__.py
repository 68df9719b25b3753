"""Black-box recovery of multi-head attention (docs written below)."""
