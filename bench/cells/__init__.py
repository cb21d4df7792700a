"""One module per benchmark cell; each exposes `run(scale) -> CellReport`."""
