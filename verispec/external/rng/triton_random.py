"""Triton's random functions fed by a capture: ``tl.rand`` inside a kernel under the interpreter is one of verispec's
keyed uniforms, and a Gumbel-max race over a block of them is read by ``rng.triton_races``'s race rule.

vLLM's V2 model runner draws its noise inside its kernels (``tl.rand(tl.randint(seed, pos), token)`` for the
Gumbel noise of drafting and resampling, ``tl.rand(seed, pos)`` for the acceptance uniform), so neither torch's
generators nor memory hold it: the draw itself is replaced while a capture is entered (``install``). From release
0.31 its Gumbel noise is a hash of (seed, pos, token) computed in the kernel (``murmur3_uniform32``): an adapter
registers such a function (``feed_hashed_uniform``), and it is fed as ``tl.rand`` is, keyed by its inputs.
"""

from __future__ import annotations

import sys

import numpy as np

from verispec.external.rng.triton_races import _refuse_draw, _Trace, _traced

#: Triton's other random functions: their numbers are not fed, so a kernel that draws with them is refused.
UNFED = ("randint4x", "rand4x", "randn", "randn4x", "philox")

#: An engine's own in-kernel generators, fed as ``tl.rand`` is: (module, function) -> (the names of its key
#: arguments, the name of its lane offsets, its dtype). A hash of (key, offset) made into a uniform (vLLM's
#: ``murmur3_uniform32``) is one of verispec's keyed uniforms at key (function, *key), lane offset: an ideal random
#: function of its inputs, as Philox is taken to be. Adapters register theirs (``feed_hashed_uniform``).
HASHED_UNIFORMS: dict = {}
#: An engine's numerical helpers read by their meaning where a fed uniform goes through them: (module, function)
#: -> the function that stands for it (``_log1p_neg``: log(1 - u), which a Gumbel draw -log(-log(1 - u)) takes).
HELPERS_READ: dict = {}


def feed_hashed_uniform(module: str, function: str, keys: tuple, offset: str, dtype: str = "float32") -> None:
    """Feed ``module.function`` (an @triton.jit hash of its ``keys`` arguments and ``offset`` lanes to a uniform in
    (0, 1) of ``dtype``, float32 or float64) from verispec's keyed uniforms while a capture is entered. The stream
    is named by the function's name and its keys, so a module that imported the function reads the same one."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"a hashed uniform is float32 or float64, got {dtype!r}")
    HASHED_UNIFORMS[(module, function)] = (tuple(keys), offset, dtype)


def read_as_log1p_neg(module: str, function: str) -> None:
    """Read ``module.function(u)`` as log(1 - u) while a capture is entered (an engine's own approximation of it,
    e.g. a series near 0: the noise's law is taken in exact arithmetic, as the race rule takes every Gumbel draw)."""
    HELPERS_READ[(module, function)] = _log1p_neg


def install(capture) -> None:
    """Replace ``tl.rand`` and ``tl.randint`` for ``capture`` while it is entered.

    ``tl.rand(seed, offsets)`` is the uniform at key (seed, offset) (Philox): each is one of verispec's keyed
    uniforms (``Capture.keyed_lanes``, the key ``("philox", seed)`` that ``verispec.keyed.rand`` uses too), the same
    wherever a kernel draws it. A draw of one lane is fed its uniform at once; a block of lanes is followed
    (``_Traced``) through a Gumbel draw into a race, where only the live lanes' uniforms are taken. ``tl.randint``
    is fed too: the uint32 floor(u 2^32) of the keyed uniform at the same key, so an integer used as noise is
    integrated as a draw, and one used as the seed of a ``tl.rand`` (vLLM's ``tl.randint(seed, pos)`` derives its
    Gumbel key) names the same stream wherever the same (seed, pos) asks for it. Triton's other random functions
    (``UNFED``) are refused: verispec does not feed their numbers."""
    language = sys.modules.get("triton.language")
    if language is None or not hasattr(language, "rand"):
        return
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    original_randint = language.randint

    def rand(seed, offset, n_rounds=None):
        return _fed_lanes(capture, _key(capture, seed, "tl.rand"), offset, "tl.rand")

    def randint(seed, offset, n_rounds=None):
        result = _uint32_like(tl, TensorHandle, seed, offset)
        if result is None:  # not one integer seed and a block of integer offsets: Triton's own checks and shape
            result = original_randint(seed, offset) if n_rounds is None else original_randint(seed, offset, n_rounds)
        key = _key(capture, seed, "tl.randint")
        offsets = np.asarray(getattr(getattr(offset, "handle", None), "data", offset)).astype(np.int64)
        values, _ = capture.keyed_lanes(key, offsets.reshape(-1))  # the integer's own uniform, fed
        fed = np.floor(np.asarray(values, dtype=np.float64) * 2.0 ** 32).astype(np.uint64).astype(np.uint32)
        capture.key_origins.update(dict.fromkeys(fed.tolist(), True))
        data = fed.reshape(np.shape(result.handle.data)).view(result.handle.data.dtype).view(_KeyIntegers)
        data.origins = [(key, int(where)) for where in offsets.reshape(-1).tolist()]
        result.handle.data = data
        return result

    capture._patch(language, "rand", rand)
    capture._patch(language, "randint", randint)
    for name in UNFED:
        if hasattr(language, name):
            capture._patch(language, name, _unfed(capture, name))
    for (module_name, function), (keys, offset, dtype) in HASHED_UNIFORMS.items():
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, function):
            capture._patch(module, function, _hashed(capture, function, getattr(module, function), keys, offset,
                                                     dtype))
    for (module_name, function), meaning in HELPERS_READ.items():
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, function):
            capture._patch(module, function, meaning)


def _fed_lanes(capture, key: tuple, offset, what: str, dtype: str = "float32"):
    """The uniforms of keyed lanes ``offset`` at ``key`` as a Triton float32 (or float64) tensor: one lane fed at
    once, a block of lanes placeholders until a race reads its live lanes (``rng.triton_races._keyed_race``)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    where = np.asarray(getattr(getattr(offset, "handle", None), "data", offset))
    if where.dtype.kind not in "iu":
        _refuse_draw(capture, f"{what} at offsets of dtype {where.dtype}")
    offsets = where.astype(np.int64)
    shape = tuple(getattr(offset, "shape", ()) or ())
    element = tl.float64 if dtype == "float64" else tl.float32
    if offsets.size == 1:
        values, _ = capture.keyed_lanes(key, offsets.reshape(-1))
        data = (np.clip(np.asarray(values, dtype=np.float64), 2.0 ** -64, 1.0 - 2.0 ** -53) if dtype == "float64"
                else _float32_uniforms(values)).reshape(offsets.shape)
    else:  # placeholders until a race reads the live lanes
        data = _traced(np.full(offsets.shape, 0.5, dtype=dtype),
                       _Trace(capture, None, "u", key=key, offsets=offsets.reshape(-1).copy()))
    kind = tl.block_type(element, list(shape)) if shape else element
    return tl.core.tensor(TensorHandle(data, element), kind)


def _hashed(capture, name: str, original, keys: tuple, offset: str, dtype: str):
    """``original`` (an engine's hash-to-uniform, ``HASHED_UNIFORMS``) fed: each key argument is read as
    ``_key`` reads a ``tl.rand`` seed (one value for every lane, else refused; an integer ``tl.randint`` fed names
    the stream it was drawn from), and together they name the stream; its offsets are the lanes."""
    import inspect

    signature = inspect.signature(getattr(original, "fn", original))

    def fed(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = (name, *(_key(capture, bound.arguments[argument], name, argument)[1:] for argument in keys))
        return _fed_lanes(capture, key, bound.arguments[offset], name, dtype)

    return fed


def _log1p_neg(value):
    """log(1 - u) on a fed uniform, written as the race rule reads it (``log1p`` of ``-u``)."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return tl.core.tensor(TensorHandle(np.log1p(np.negative(value.handle.data)), value.handle.dtype), value.type)


def _uint32_like(tl, handle_type, seed, offset):
    """The uint32 tensor of ``offset``'s shape that Triton's ``tl.randint(seed, offset)`` returns, its values left to
    be fed (zeros), or None where ``seed`` is not one integer or ``offset`` not integers: the interpreter's Philox
    (ten rounds through four nested interpreted functions) computes values that are replaced at once anyway."""
    if not (isinstance(seed, tl.core.tensor) and isinstance(offset, tl.core.tensor)):
        return None
    if seed.type.is_block() or not seed.dtype.is_int() or not offset.dtype.is_int():
        return None
    data = np.zeros(np.shape(offset.handle.data), dtype=np.uint32)
    kind = offset.type.with_element_ty(tl.uint32) if offset.type.is_block() else tl.uint32
    return tl.core.tensor(handle_type(data, tl.uint32), kind)


def _key(capture, seed, what: str, argument: str = "seed") -> tuple:
    """The keyed stream of a Triton random draw: ``("philox", seed)``, one seed for every lane; a seed that is an
    integer ``tl.randint`` fed names the stream derived from where it was drawn, ``("philox", stream, offset)``
    (Philox of Philox is an ideal random function of both keys), so it depends on the request's seed as the key
    it stands for does."""
    data = getattr(getattr(seed, "handle", None), "data", seed)
    origins = getattr(data, "origins", None)
    if origins is not None:  # a tl.randint integer, untouched
        if len(set(origins)) != 1:
            _refuse_draw(capture, f"{what} with its {argument} differing across lanes")
        return ("philox", *origins[0])
    seeds = np.asarray(data).reshape(-1)
    if len(set(seeds.tolist())) != 1:
        _refuse_draw(capture, f"{what} with its {argument} differing across lanes")
    value = int(seeds[0])
    if value % 2 ** 32 in capture.key_origins:  # an integer tl.randint fed, changed on its way: its origin is lost
        _refuse_draw(capture, f"{what} seeded by arithmetic on a tl.randint integer")
    return ("philox", value)


class _KeyIntegers(np.ndarray):
    """The integers ``tl.randint`` fed, with where each was drawn (``origins``: (stream, offset) a lane); any
    arithmetic, view or copy gives plain integers, whose origin is no longer known."""

    origins = None

    def __array_finalize__(self, obj):
        self.origins = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [np.asarray(x) if isinstance(x, _KeyIntegers) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(x) if isinstance(x, _KeyIntegers) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*plain, **kwargs)


def _float32_uniforms(values: np.ndarray) -> np.ndarray:
    """Fed uniforms as the float32 numbers tl.rand returns: on the grid of 2^-24, below 1."""
    return np.minimum(np.floor(np.asarray(values, dtype=np.float64) * 2.0 ** 24) * 2.0 ** -24,
                      1.0 - 2.0 ** -24).astype(np.float32)


def _unfed(capture, name: str):
    def refuse(*args, **kwargs):
        _refuse_draw(capture, f"tl.{name}")

    return refuse
