"""On-disk state of trainable models: `<data_dir>/<project>/models/<name>/` (see layout.py)."""
