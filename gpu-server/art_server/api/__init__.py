"""The HTTP layer: thin routers over the engine and the model manager; no sampling logic here."""
