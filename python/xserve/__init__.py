"""xserve: the Python side of the xserve inference server.

- ``Client`` / ``AsyncClient``: HTTP (Open Inference Protocol v2, binary tensors).
- ``NatsClient`` / ``AsyncNatsClient``: NATS request-reply (``pip install 'xserve[nats]'``).
- ``export``: torch.export a model into a model repository (needs torch).
- ``export_causal_lm``: a Hugging Face causal LM into a generative model (needs the torch extra).
- ``export_seq2seq``: a Hugging Face encoder-decoder (T5, Whisper) into a generative model (needs the torch extra).
- ``torch.compile(model, backend="xserve")``: run compiled graphs on a server (needs torch).
"""

from __future__ import annotations

from typing import Any

from .client import AsyncClient, Client
from .errors import XserveError
from .nats import AsyncNatsClient, NatsClient

__all__ = ["AsyncClient", "AsyncNatsClient", "Client", "NatsClient", "XserveError", "export", "export_causal_lm", "export_seq2seq"]
__version__ = "0.1.0"


def export(*args: Any, **kwargs: Any) -> Any:
    """torch.export a model into a model repository; see xserve.export_.export."""
    from .export_ import export as _export

    return _export(*args, **kwargs)


def export_causal_lm(*args: Any, **kwargs: Any) -> Any:
    """Export a Hugging Face causal LM into a model repository; see xserve.causal_lm.export_causal_lm."""
    from .causal_lm import export_causal_lm as _export

    return _export(*args, **kwargs)


def export_seq2seq(*args: Any, **kwargs: Any) -> Any:
    """Export a Hugging Face encoder-decoder into a model repository; see xserve.seq2seq.export_seq2seq."""
    from .seq2seq import export_seq2seq as _export

    return _export(*args, **kwargs)
