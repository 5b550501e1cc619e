"""mcutrain's board files as package data (installed as mcutrain.boards): one TOML file per board.
Nothing here is imported; mcutrain.exporter.boards reads the files."""
