"""What the code under check may send verispec: plain values, read by a parser that cannot run code.

The sandbox (``verispec.guard.sandbox``) runs the user's code in a process of its own and hands its results to the
process that reaches the verdict. That process must never let those bytes do anything but stand for values:
``pickle`` would run whatever the sender asks for (its ``__reduce__``), so the sandbox's replies are written in this
format instead. A message is one JSON text naming values, and binary blocks holding the arrays' bytes::

    [8 bytes: length of the rest] [4 bytes: length of the JSON text] [JSON text] [blocks, back to back]

The JSON text is ``{"v": VALUE, "blocks": [length, ...]}``. A VALUE is a JSON scalar (null, true, false, a number,
a string), a list (a Python list), or an object with one tag:

==============  =============================================================================================
``{"t": [...]}``             a tuple
``{"D": [[k, v], ...]}``     a dict
``{"set": [...], "frozen": b}``  a set or frozenset
``{"F": ["n", "d"]}``        a ``fractions.Fraction`` (numerator and denominator as decimal text)
``{"A": i, "d": s, "s": [...]}``  a numpy array: block ``i``, dtype string ``s`` (bool, ints, floats, complex only),
                             shape; its bytes must fill the block exactly
``{"O": [...], "s": [...]}``  a numpy object array (exact rationals): its elements, flat, and its shape
``{"S": s, "v": VALUE}``     a numpy scalar of dtype ``s``
``{"T": ARRAY, "d": s}``     a torch tensor (sent as its numpy array; ``s`` its torch dtype, for the receiver)
``{"B": i}``                 bytes: block ``i``
``{"X": "type", "r": "repr"}``  something else the code returned: its type's name and repr, as an ``Opaque``
==============  =============================================================================================

``decode`` checks everything it reads (tags, dtypes, shapes against block sizes, nesting depth, sizes) and raises
``WireError`` on anything else, so a hostile sender gets a one-line refusal, never code run. Standard library and
numpy only.
"""

from __future__ import annotations

import json
import math
import struct
from fractions import Fraction

import numpy as np

#: The largest message either side reads (a [nodes, vocabulary] float64 law at V = 151,936 is a few MB).
MAX_MESSAGE_BYTES = 1 << 31
#: The deepest nesting of lists, tuples and dicts a message may hold.
MAX_DEPTH = 64
#: dtypes an array or scalar may have (any byte order): bool, integers, floats and complex numbers.
_KINDS = "biufc"


class WireError(ValueError):
    """A message that is not in this format (the sender is broken or hostile)."""


class Opaque:
    """A value of a type the wire does not carry (the code under check returned it): its type's name and repr,
    which is all the receiver needs to say what it got."""

    __slots__ = ("type_name", "text")

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self) -> str:
        return self.text


def encode(value) -> bytes:
    """``value`` as one message (see the module docstring). Anything the format has no tag for is sent as an
    ``Opaque`` (its type's name and repr), never refused: the receiver decides what a value may be."""
    blocks: list[bytes] = []
    body = json.dumps({"v": _encode(value, blocks, 0), "blocks": [len(block) for block in blocks]},
                      separators=(",", ":")).encode("utf-8")
    rest = struct.pack("<I", len(body)) + body + b"".join(blocks)
    return struct.pack("<Q", len(rest)) + rest


def _encode(value, blocks: list[bytes], depth: int):
    if depth >= MAX_DEPTH:  # the reader refuses deeper values: what lies below crosses as its repr
        return _opaque(value, "nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value  # JSON's NaN and Infinity included (Python's json reads them back)
    if isinstance(value, Fraction):
        return {"F": [str(value.numerator), str(value.denominator)]}
    if isinstance(value, np.ndarray):
        return _encode_array(value, blocks, depth)
    if isinstance(value, np.generic):
        if value.dtype.kind in _KINDS:
            return {"S": value.dtype.str, "v": _encode(_scalar_text(value), blocks, depth + 1)}
        return _encode(value.item(), blocks, depth + 1)
    if type(value).__module__.partition(".")[0] == "torch" and hasattr(value, "detach"):
        return _encode_tensor(value, blocks, depth)
    if isinstance(value, tuple):
        return {"t": [_encode(item, blocks, depth + 1) for item in value]}
    if isinstance(value, list):
        return [_encode(item, blocks, depth + 1) for item in value]
    if isinstance(value, dict):
        return {"D": [[_encode(key, blocks, depth + 1), _encode(item, blocks, depth + 1)]
                      for key, item in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"set": [_encode(item, blocks, depth + 1) for item in value], "frozen": isinstance(value, frozenset)}
    if isinstance(value, (bytes, bytearray)):
        blocks.append(bytes(value))
        return {"B": len(blocks) - 1}
    return _opaque(value)


def _scalar_text(value: np.generic):
    """A numpy scalar's value in JSON without loss: ints as ints, floats as their repr (round-trips float64)."""
    item = value.item()
    if isinstance(item, float):
        return repr(item)
    if isinstance(item, complex):
        return [repr(item.real), repr(item.imag)]
    return item


def _encode_array(array: np.ndarray, blocks: list[bytes], depth: int):
    if array.dtype.kind in _KINDS:
        blocks.append(np.ascontiguousarray(array).tobytes())
        return {"A": len(blocks) - 1, "d": array.dtype.str, "s": list(array.shape)}
    if array.dtype.kind == "O":
        return {"O": [_encode(item, blocks, depth + 1) for item in array.reshape(-1).tolist()],
                "s": list(array.shape)}
    return _opaque(array)


def _encode_tensor(tensor, blocks: list[bytes], depth: int):
    plain = tensor.detach().to("cpu")
    try:
        array = plain.numpy()
    except (TypeError, RuntimeError):  # bfloat16 and other dtypes numpy lacks: float32 holds their values exactly
        array = plain.float().numpy()
    return {"T": _encode_array(array, blocks, depth), "d": str(tensor.dtype)}


def _opaque(value, why: str = "") -> dict:
    try:
        text = repr(value)
    except Exception:  # the code's own repr may fail in any way
        text = f"<{type(value).__name__}>"
    if why:
        text = f"<{type(value).__name__}: {why}>"
    return {"X": type(value).__name__[:100], "r": text[:200]}


# --- records: a message cut for a channel of records (SOCK_SEQPACKET) ------------------------------------------

#: A record: this mark, the call's nonce (16 bytes), the record's index in its message (4 bytes) and whether it is
#: the message's last (1 byte), then up to ``RECORD_BYTES`` of the message (``verispec.guard.sandbox``'s channel).
RECORD_MARK = b"VSB1"
RECORD_HEADER = struct.Struct("<4s16sIB")
RECORD_BYTES = 60_000


def send_records(channel, nonce: bytes, data: bytes) -> None:
    """``data`` as records of ``RECORD_BYTES`` at most, each with its header (see ``RECORD_MARK``)."""
    count = max(1, -(-len(data) // RECORD_BYTES))
    for index in range(count):
        chunk = data[index * RECORD_BYTES:(index + 1) * RECORD_BYTES]
        channel.sendall(RECORD_HEADER.pack(RECORD_MARK, nonce, index, index == count - 1) + chunk)


def record_header(record: bytes):
    if len(record) < RECORD_HEADER.size or len(record) > RECORD_HEADER.size + RECORD_BYTES:
        return None
    header = RECORD_HEADER.unpack(record[:RECORD_HEADER.size])
    return header if header[0] == RECORD_MARK and header[3] in (0, 1) else None



# --- reading --------------------------------------------------------------------------------------------------

def decode(message: bytes, *, torch_device=None):
    """The value of one message (without its 8-byte length). ``WireError`` on anything that is not this format.
    A tensor becomes a torch tensor (on ``torch_device`` when given) only where torch is loaded already."""
    if len(message) < 4:
        raise WireError("a message shorter than its header")
    (size,) = struct.unpack("<I", message[:4])
    if 4 + size > len(message):
        raise WireError("a header longer than the message")
    try:
        body = json.loads(message[4:4 + size].decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise WireError(f"a header that is not JSON ({type(error).__name__})") from None
    if not isinstance(body, dict) or set(body) != {"v", "blocks"} or not isinstance(body["blocks"], list) \
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in body["blocks"]):
        raise WireError("a header without its value and block sizes")
    blocks, offset = [], 4 + size
    for length in body["blocks"]:
        if offset + length > len(message):
            raise WireError("a block past the end of the message")
        blocks.append(message[offset:offset + length])
        offset += length
    if offset != len(message):
        raise WireError("bytes after the last block")
    return _Reader(blocks, torch_device).value(body["v"], 0)


class _Reader:
    def __init__(self, blocks: list[bytes], torch_device):
        self.blocks, self.torch_device = blocks, torch_device

    def value(self, node, depth: int):
        if depth > MAX_DEPTH:
            raise WireError("values nested too deeply")
        if node is None or isinstance(node, (bool, int, str)):
            return node
        if isinstance(node, float):
            return node
        if isinstance(node, list):
            return [self.value(item, depth + 1) for item in node]
        if not isinstance(node, dict) or not node:
            raise WireError(f"a value of JSON type {type(node).__name__}")
        tag = next(iter(node))
        reader = _TAGS.get(tag)
        if reader is None:
            raise WireError(f"an unknown tag {tag[:20]!r}")
        return reader(self, node, depth)

    def _items(self, node, key: str, depth: int) -> list:
        items = node.get(key)
        if not isinstance(items, list):
            raise WireError(f"a {key!r} value that is not a list")
        return [self.value(item, depth + 1) for item in items]

    def tuple(self, node, depth):
        return tuple(self._items(node, "t", depth))

    def dict(self, node, depth):
        pairs = node.get("D")
        if not isinstance(pairs, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
            raise WireError("a dict that is not a list of pairs")
        out = {}
        for key, item in pairs:
            key = self.value(key, depth + 1)
            try:
                out[key] = self.value(item, depth + 1)
            except TypeError:  # an unhashable key
                raise WireError("a dict key that cannot be a key") from None
        return out

    def set(self, node, depth):
        try:
            items = self._items(node, "set", depth)
            return frozenset(items) if node.get("frozen") is True else set(items)
        except TypeError:
            raise WireError("a set member that cannot be in a set") from None

    def fraction(self, node, depth):
        parts = node.get("F")
        if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) for p in parts)
                and all(len(p) < 100_000 for p in parts)):
            raise WireError("a fraction that is not two decimal texts")
        try:
            numerator, denominator = int(parts[0]), int(parts[1])
            return Fraction(numerator, denominator)
        except (ValueError, ZeroDivisionError):
            raise WireError("a fraction that is not two integers (the second not zero)") from None

    def array(self, node, depth):
        index, shape = node.get("A"), node.get("s")
        dtype = _dtype(node.get("d"))
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(self.blocks)):
            raise WireError("an array whose block does not exist")
        shape = _shape(shape)
        block = self.blocks[index]
        if math.prod(shape) * dtype.itemsize != len(block):
            raise WireError(f"an array of shape {list(shape)} and dtype {dtype} in a block of {len(block)} bytes")
        return np.frombuffer(block, dtype=dtype).reshape(shape).copy()

    def objects(self, node, depth):
        items = self._items(node, "O", depth)
        shape = _shape(node.get("s"))
        if math.prod(shape) != len(items):
            raise WireError(f"an object array of shape {list(shape)} with {len(items)} elements")
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(shape)

    def scalar(self, node, depth):
        dtype = _dtype(node.get("S"))
        item = node.get("v")
        try:
            if dtype.kind == "c":
                if not (isinstance(item, list) and len(item) == 2 and all(isinstance(p, str) for p in item)):
                    raise ValueError
                return dtype.type(complex(float(item[0]), float(item[1])))
            if dtype.kind == "f":
                if not isinstance(item, str) or len(item) > 40:
                    raise ValueError
                return dtype.type(float(item))
            if dtype.kind in "iu":
                if not isinstance(item, int) or isinstance(item, bool):
                    raise ValueError
                return dtype.type(item)
            if not isinstance(item, bool):
                raise ValueError
            return dtype.type(item)
        except (ValueError, OverflowError, TypeError):
            raise WireError(f"a scalar of dtype {dtype} whose value does not fit it") from None

    def tensor(self, node, depth):
        inner = node.get("T")
        if not isinstance(inner, dict) or "A" not in inner:
            raise WireError("a tensor without its array")
        array = self.array(inner, depth + 1)
        name = node.get("d")
        import sys

        torch = sys.modules.get("torch")
        if torch is None:
            return array
        dtype = getattr(torch, str(name).removeprefix("torch."), None) if isinstance(name, str) else None
        tensor = torch.from_numpy(array)
        if isinstance(dtype, torch.dtype):
            tensor = tensor.to(dtype)
        return tensor if self.torch_device is None else tensor.to(self.torch_device)

    def bytes(self, node, depth):
        index = node.get("B")
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(self.blocks)):
            raise WireError("bytes whose block does not exist")
        return self.blocks[index]

    def opaque(self, node, depth):
        name, text = node.get("X"), node.get("r")
        if not (isinstance(name, str) and isinstance(text, str)):
            raise WireError("an opaque value without its type name and repr")
        return Opaque(name[:100], text[:200])


_TAGS = {"t": _Reader.tuple, "D": _Reader.dict, "set": _Reader.set, "F": _Reader.fraction, "A": _Reader.array,
         "O": _Reader.objects, "S": _Reader.scalar, "T": _Reader.tensor, "B": _Reader.bytes, "X": _Reader.opaque}


def _dtype(text) -> np.dtype:
    if not isinstance(text, str) or len(text) > 8:
        raise WireError("a dtype that is not a short string")
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise WireError(f"an unknown dtype {text!r}") from None
    if dtype.kind not in _KINDS or dtype.hasobject or dtype.names is not None or dtype.subdtype is not None:
        raise WireError(f"a dtype verispec does not read from the code under check: {text!r}")
    return dtype


def _shape(shape) -> tuple[int, ...]:
    if not (isinstance(shape, list) and len(shape) <= 32
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 40 for n in shape)):
        raise WireError("a shape that is not a short list of sizes")
    return tuple(shape)


__all__ = ["MAX_MESSAGE_BYTES", "RECORD_BYTES", "RECORD_HEADER", "RECORD_MARK", "Opaque", "WireError", "decode",
           "encode", "record_header", "send_records"]
