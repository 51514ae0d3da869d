"""ctxgate: a transparent OpenAI-compatible gateway that manages agents' context."""

__version__ = "0.1.0"
