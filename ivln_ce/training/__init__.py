"""Training loops: RedNet (this package grows with teacher forcing and DAgger)."""
