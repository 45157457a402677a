"""The Open Inference Protocol v2 body with the binary tensor extension.

Both clients (HTTP and NATS) send and read the same bytes: a JSON header,
then each tensor's raw little-endian bytes in the order the header lists them;
the header's length travels in ``Inference-Header-Content-Length``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import numpy as np

from .errors import XserveError

HEADER_LENGTH = "Inference-Header-Content-Length"

# numpy dtype -> OIP datatype.
_TO_OIP: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
}
_FROM_OIP: dict[str, np.dtype[Any]] = {v: np.dtype(k) for k, v in _TO_OIP.items()}


def oip_datatype(dtype: np.dtype[Any]) -> str:
    """The OIP datatype name of a numpy dtype."""
    try:
        return _TO_OIP[np.dtype(dtype).name]
    except KeyError:
        raise TypeError(f"xserve: dtype {np.dtype(dtype)} has no Open Inference Protocol datatype; want one of {sorted(_TO_OIP)}") from None


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The numpy dtype of an OIP datatype name."""
    try:
        return _FROM_OIP[datatype]
    except KeyError:
        raise XserveError(0, f"the server answered datatype {datatype!r}, which this client cannot decode") from None


def encode_request(
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
    request_id: str | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> tuple[bytes, int]:
    """An OIP inference body with every input and output in binary form.

    Returns the body and the length of its JSON header.
    """
    header_inputs = []
    blobs = []
    for name, value in inputs.items():
        shape = np.shape(value)
        arr = np.ascontiguousarray(value).reshape(shape)  # ascontiguousarray makes a scalar [1]
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        raw = arr.tobytes()
        header_inputs.append(
            {
                "name": name,
                "shape": list(arr.shape),
                "datatype": oip_datatype(arr.dtype),
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        blobs.append(raw)
    header: dict[str, Any] = {"inputs": header_inputs}
    params: dict[str, Any] = dict(parameters or {})
    if outputs is None:
        params["binary_data_output"] = True
    else:
        header["outputs"] = [{"name": o, "parameters": {"binary_data": True}} for o in outputs]
    if params:
        header["parameters"] = params
    if request_id is not None:
        header["id"] = request_id
    head = json.dumps(header, separators=(",", ":")).encode()
    return head + b"".join(blobs), len(head)


def decode_response(body: bytes, header_length: int | None) -> dict[str, np.ndarray]:
    """The outputs of an OIP inference answer, binary or JSON."""
    if header_length is None:
        header_length = len(body)
    if header_length > len(body):
        raise XserveError(0, f"the answer's JSON header is said to be {header_length} bytes, the body is only {len(body)}")
    try:
        header = json.loads(body[:header_length])
    except ValueError as e:
        raise XserveError(0, f"the answer is not JSON: {e}") from None
    offset = header_length
    out: dict[str, np.ndarray] = {}
    for o in header.get("outputs", []):
        dtype = numpy_dtype(o["datatype"])
        shape = tuple(int(d) for d in o["shape"])
        size = (o.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            raw = body[offset : offset + size]
            if len(raw) != size:
                raise XserveError(0, f"output {o['name']!r}: {size} bytes announced, {len(raw)} left in the body")
            offset += size
            out[o["name"]] = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
        else:
            out[o["name"]] = np.asarray(o["data"], dtype=dtype).reshape(shape)
    if offset != len(body):
        raise XserveError(0, f"{len(body) - offset} bytes left over after the answer's outputs")
    return out


def error_message(body: bytes) -> str:
    """The message of an error body ``{"error": "..."}``, else the body."""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and isinstance(doc.get("error"), str):
            return doc["error"]
    except ValueError:
        pass
    return body.decode("utf-8", "replace").strip()
