"""RNG capture of torch's generators: ``FeedMode`` feeds every torch draw from an ``rng.Capture``.

Imported by ``rng.Capture`` only when torch is already loaded (so numpy-only runs never import torch). Its
handlers replace torch's random primitives as attributes (``table``: ``torch.rand``, ``Tensor.exponential_``,
...), each drawing from the capture by the rules of ``rng.rules``; torch's other random primitives are refused
by name. Pushed as a ``TorchFunctionMode`` it also catches names bound before the call, and follows exponential
noise for the race rule: ``argmax(w / E)`` read as one inverse-CDF draw from w (``docs/guides/check_external.md``,
"Glossary of RNG capture", states when, and why the law is the same).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from verispec.external.exact import NotPiecewiseConstantError
from verispec.external.rng import rules
from verispec.external.rng import torch_fresh as fresh
from verispec.external.rng import triton_races as rng_triton
from verispec.external.tree_arrays import inverse_cdf

_DIVISIONS = {Tensor.div, torch.div, Tensor.true_divide, torch.true_divide, Tensor.__truediv__, Tensor.div_}
#: 1 / E: remembered as inverse noise for a race inside a Triton kernel (``rng.triton_races``).
_RECIPROCALS = {Tensor.reciprocal, torch.reciprocal}
#: A row or slice of the noise (a view): followed, so that a refill through it (a seeded request's row drawn
#: again from its own generator) keeps the race readable, and any other use of it is seen.
_VIEWS = {Tensor.__getitem__, Tensor.select}
_ARGMAXES = {Tensor.argmax, torch.argmax}
#: Tensor methods that read no values.
_METADATA = {Tensor.size, Tensor.dim, Tensor.__len__, Tensor.numel, Tensor.stride, Tensor.is_contiguous,
             Tensor.is_floating_point, Tensor.element_size, Tensor.nelement, Tensor.ndimension,
             Tensor.storage_offset, Tensor.new_empty}
#: The memory itself: read no values when Triton's interpreter asks (it hands a kernel the address, and its loads of
#: remembered noise are followed by ``rng.triton_races``), but a door to reading them past torch for any other caller.
_MEMORY = {Tensor.data_ptr, Tensor.untyped_storage}
#: Tensor attributes whose reading does not read the values.
_METADATA_ATTRIBUTES = frozenset({"shape", "dtype", "device", "is_cuda", "ndim", "requires_grad", "layout",
                                  "is_sparse", "names", "is_leaf", "grad_fn"})
#: torch's random primitives that are not fed: refused by name.
_REFUSED = {torch.poisson: "torch.poisson", Tensor.cauchy_: "Tensor.cauchy_",
            Tensor.geometric_: "Tensor.geometric_", Tensor.log_normal_: "Tensor.log_normal_",
            torch.binomial: "torch.binomial", torch._standard_gamma: "torch._standard_gamma",
            torch.nn.functional.dropout: "torch.nn.functional.dropout",
            torch.nn.functional.alpha_dropout: "torch.nn.functional.alpha_dropout"}


@dataclass
class _Noise:
    """Exponential noise E filled by ``exponential_``, followed for the race rule."""

    tensor: object
    uniforms: np.ndarray  # E.shape: the u of each element
    columns: np.ndarray  # per-row shape: tape column of each element
    site: str
    state: str = "fresh"  # fresh -> divided -> raced; or impure


@dataclass
class _Derived:
    """A view of followed noise (``kind`` "view") or its reciprocal remembered for a kernel (``kind`` "inverse")."""

    tensor: object
    noise: _Noise
    kind: str
    state: str = "fresh"


@dataclass
class _Score:
    """The quotient w / E of a followed noise E; ``weights``: w as it was when the division ran (float64, a copy)."""

    tensor: object
    noise: _Noise
    weights: np.ndarray
    state: str = "fresh"


class FeedMode(TorchFunctionMode):
    """Feeds torch's draws from ``capture`` (an entered ``rng.Capture``): its handlers replace torch's
    primitives as attributes (``table``), and while pushed as a TorchFunctionMode it also catches names bound
    before the call and follows exponential noise for the race rule (see ``rng.Capture``)."""

    def __init__(self, capture):
        super().__init__()
        self.capture = capture
        self.handlers = {
            torch.rand: self.rand, torch.rand_like: self.rand_like, Tensor.uniform_: self.uniform_,
            torch.randn: self.randn, torch.randn_like: self.randn_like, Tensor.normal_: self.normal_,
            torch.normal: self.normal, Tensor.exponential_: self.exponential_,
            torch.bernoulli: self.bernoulli, Tensor.bernoulli: self.bernoulli, Tensor.bernoulli_: self.bernoulli_,
            torch.multinomial: self.multinomial, Tensor.multinomial: self.multinomial,
            torch.randint: self.randint, torch.randint_like: self.randint_like, Tensor.random_: self.random_,
            torch.randperm: self.randperm,
        }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = self.handlers.get(func)
        if handler is not None:
            self.capture.caught_by_mode += 1
            return handler(*args, **kwargs)
        if func in _REFUSED:
            if func in (torch.nn.functional.dropout, torch.nn.functional.alpha_dropout) and not (
                    kwargs.get("training", args[2] if len(args) > 2 else True)
                    and float(kwargs.get("p", args[1] if len(args) > 1 else 0.5)) > 0):
                return func(*args, **kwargs)
            if self.capture.mode == "forbid":
                self.capture.draw(_REFUSED[func], ())
            self.capture.refuse(_REFUSED[func])
        if self.capture.tracked:
            return self.follow(func, args, kwargs)
        return func(*args, **kwargs)

    # -- uniform, normal, exponential, Bernoulli

    def rand(self, *args, **kwargs):
        shape = _size_of(args, kwargs)
        values, columns = self.capture.draw("torch.rand", shape, kwargs.get("generator"))
        dtype = kwargs.get("dtype") or (kwargs["out"].dtype if kwargs.get("out") is not None
                                        else torch.get_default_dtype())
        self.capture.float32_draws += dtype == torch.float32
        return self._fresh(_finish(_uniform_like(values, dtype, kwargs.get("device")), kwargs), columns, kwargs)

    def rand_like(self, input, **kwargs):
        values, columns = self.capture.draw("torch.rand_like", tuple(input.shape), kwargs.get("generator"))
        dtype, device = kwargs.get("dtype") or input.dtype, kwargs.get("device") or input.device
        self.capture.float32_draws += dtype == torch.float32
        return self._fresh(_finish(_uniform_like(values, dtype, device), kwargs), columns, kwargs)

    def _fresh(self, result, columns, kwargs):
        """``result`` followed until read, so that a refill before any read leaves its uniforms unused
        (``rng.torch_fresh``); not a tensor the call handed in (``out=``)."""
        if kwargs.get("out") is None:
            fresh.track(self.capture, result, columns)
        return result

    def uniform_(self, self_tensor, a=0.0, b=1.0, **kwargs):
        a, b = kwargs.get("from", a), kwargs.get("to", b)
        values = self.capture.draw("Tensor.uniform_", tuple(self_tensor.shape), kwargs.get("generator"))[0]
        if self_tensor.dtype == torch.float32:  # the generator's float32 draw, then scaled (rounded down)
            values = rules.on_grid(values, np.float64)
            self.capture.float32_draws += 1
        refill = fresh.overwritten(self.capture, self_tensor)  # uniforms replaced before any read are unused
        with torch.no_grad(), torch._C.DisableTorchFunction() if refill else contextlib.nullcontext():
            self_tensor.copy_(_as_tensor(rules.uniform(values, a, b), self_tensor.dtype, self_tensor.device, down=True))
        return self_tensor

    def randn(self, *args, **kwargs):
        shape = _size_of(args, kwargs)
        values = self.capture.draw("torch.randn", shape, kwargs.get("generator"))[0]
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        return _finish(_as_tensor(rules.normal(values), dtype, kwargs.get("device")), kwargs)

    def randn_like(self, input, **kwargs):
        values = self.capture.draw("torch.randn_like", tuple(input.shape), kwargs.get("generator"))[0]
        return _finish(_as_tensor(rules.normal(values), kwargs.get("dtype") or input.dtype,
                                 kwargs.get("device") or input.device), kwargs)

    def normal_(self, self_tensor, mean=0.0, std=1.0, **kwargs):
        values = self.capture.draw("Tensor.normal_", tuple(self_tensor.shape), kwargs.get("generator"))[0]
        with torch.no_grad():
            self_tensor.copy_(_as_tensor(rules.normal(values, mean, std), self_tensor.dtype, self_tensor.device))
        return self_tensor

    def normal(self, mean=0.0, std=1.0, size=None, **kwargs):
        means = mean.detach().cpu().numpy() if isinstance(mean, torch.Tensor) else np.asarray(mean, float)
        stds = std.detach().cpu().numpy() if isinstance(std, torch.Tensor) else np.asarray(std, float)
        shape = tuple(size) if size is not None else np.broadcast_shapes(means.shape, stds.shape)
        values = self.capture.draw("torch.normal", shape, kwargs.get("generator"))[0]
        like = next((t for t in (mean, std) if isinstance(t, torch.Tensor)), None)
        dtype = kwargs.get("dtype") or (like.dtype if like is not None else torch.get_default_dtype())
        device = kwargs.get("device") or (like.device if like is not None else None)
        return _finish(_as_tensor(rules.normal(values, means, stds), dtype, device), kwargs)

    def exponential_(self, self_tensor, lambd=1.0, **kwargs):
        values, columns = self.capture.draw("Tensor.exponential_", tuple(self_tensor.shape),
                                            kwargs.get("generator"))
        with torch.no_grad(), torch._C.DisableTorchFunction():  # the write itself is no use of followed noise
            self_tensor.copy_(_as_tensor(rules.exponential(values, float(lambd)), self_tensor.dtype,
                                         self_tensor.device))
        if self.capture.races and self.capture.tape is not None and self.capture.tape.rows == 1:
            rng_triton.remember(self.capture, self_tensor, values, columns)
        view = self.capture.tracked.get(id(self_tensor))
        if isinstance(view, _Derived) and view.kind == "view" and view.tensor is self_tensor:
            return self_tensor  # a refill of followed noise: its elements are remembered anew by address
        base = self_tensor._base
        if (self.capture.races and self.capture.tape is not None and self.capture.tape.rows == 1
                and base is not None and id(base) not in self.capture.tracked and _filled_in_parts(base)):
            # a row of a buffer filled through a view (vLLM fills each seeded request's row from its own generator,
            # into torch.empty): the buffer is followed as noise; its uniforms are read from memory when it is raced
            self.capture.tracked[id(base)] = _Noise(base, None, None, rules.site())
            self.capture.engage()
            return self_tensor
        if self.capture.races and _own_storage(self_tensor) and (self.capture.tape.rows == 1
                                                                   or self_tensor.dim() >= 2):
            self.capture.tracked[id(self_tensor)] = _Noise(self_tensor, np.array(values, copy=True), columns,
                                                           rules.site())
            self.capture.engage()  # follow what is done with the noise
        return self_tensor

    def bernoulli(self, input, p=None, **kwargs):
        probabilities = input if p is None else p
        values = self.capture.draw("torch.bernoulli", tuple(input.shape), kwargs.get("generator"))[0]
        probs = (probabilities.detach().cpu().numpy() if isinstance(probabilities, torch.Tensor)
                 else np.asarray(probabilities, float))
        if np.any((probs < 0) | (probs > 1)) or not np.all(np.isfinite(probs)):
            raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true")
        result = _as_tensor(self.capture.chose(values < probs).astype(np.float64), input.dtype, input.device)
        return _finish(result, kwargs)

    def bernoulli_(self, self_tensor, p=0.5, **kwargs):
        result = self.bernoulli(self_tensor, p, generator=kwargs.get("generator"))
        with torch.no_grad():
            self_tensor.copy_(result)
        return self_tensor

    # -- categorical and integers

    def multinomial(self, input, num_samples, replacement=False, **kwargs):
        weights = input.detach().cpu()
        weights = (weights.float() if weights.dtype in (torch.bfloat16, torch.float16) else weights).numpy()
        weights = weights if weights.dtype == np.float64 else weights.astype(np.float64)
        if weights.ndim not in (1, 2):
            raise RuntimeError("prob_dist must be 1 or 2 dim")
        rows = weights.reshape(-1, weights.shape[-1])  # [R, V]
        rules.check_weights(rows, int(num_samples), bool(replacement), "torch.multinomial")
        shape = weights.shape[:-1] + (int(num_samples),)
        u, columns = self.capture.draw("torch.multinomial", shape, kwargs.get("generator"))
        u = u.reshape(len(rows), int(num_samples))
        drawn = self.capture.chose(rules.categorical(rows, u, bool(replacement)).reshape(shape))
        if int(num_samples) == 1:  # one inverse-CDF draw per row of weights, each by its own column
            self.capture.know_categorical(columns, rows)
        return _finish(torch.from_numpy(drawn).to(device=input.device), kwargs)

    def randint(self, *args, **kwargs):
        numbers = [a for a in args if isinstance(a, (int, np.integer))]
        low, high = (0, numbers[0]) if len(numbers) == 1 else (numbers[0], numbers[1]) if numbers else (
            kwargs.get("low", 0), kwargs["high"])
        if "low" in kwargs or "high" in kwargs:
            low, high = kwargs.get("low", low), kwargs.get("high", high)
        shape = _size_of(args, kwargs, start=len(numbers))
        values = self.capture.draw("torch.randint", shape, kwargs.get("generator"))[0]
        dtype = kwargs.get("dtype") or torch.int64
        drawn = self.capture.chose(rules.integers(values, int(low), int(high)), integers=int(high) - int(low))
        return _finish(_as_tensor(drawn, dtype, kwargs.get("device")), kwargs)

    def randint_like(self, input, low=0, high=None, **kwargs):
        low, high = (0, low) if high is None else (low, high)
        values = self.capture.draw("torch.randint_like", tuple(input.shape), kwargs.get("generator"))[0]
        return _finish(_as_tensor(self.capture.chose(rules.integers(values, int(low), int(high)),
                                                     integers=int(high) - int(low)),
                                 kwargs.get("dtype") or input.dtype,
                                 kwargs.get("device") or input.device), kwargs)

    def random_(self, self_tensor, *args, **kwargs):
        bounds = list(args) + [kwargs[k] for k in ("from", "to") if k in kwargs]
        if not bounds:
            self.capture.refuse("Tensor.random_() without bounds")
        low, high = (0, bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
        values = self.capture.draw("Tensor.random_", tuple(self_tensor.shape), kwargs.get("generator"))[0]
        with torch.no_grad():
            self_tensor.copy_(_as_tensor(self.capture.chose(rules.integers(values, int(low), int(high)),
                                                            integers=int(high) - int(low)),
                                         self_tensor.dtype,
                                         self_tensor.device))
        return self_tensor

    def randperm(self, n, **kwargs):
        n = int(n)
        u = self.capture.draw("torch.randperm", (n,), kwargs.get("generator"))[0].reshape(1, n)
        drawn = rules.categorical(np.ones((1, n)), u, False)[0] if n else np.zeros(0, dtype=np.int64)
        self.capture.chose(drawn)
        return _finish(_as_tensor(drawn, kwargs.get("dtype") or torch.int64, kwargs.get("device")), kwargs)

    # -- exponential races

    def follow(self, func, args, kwargs):
        capture = self.capture
        tracked = capture.tracked
        involved = _involved(tracked, args, kwargs)
        if any(fresh.is_fresh(entry) for entry in involved):  # uniforms followed until read (rng_torch_fresh)
            result = fresh.view(capture, func, args, kwargs, involved) if func in _VIEWS else None
            if result is not None:
                return result
            if not (func in _METADATA or _harmless_attribute(func)):
                fresh.note_use(involved)
            involved = [entry for entry in involved if not fresh.is_fresh(entry)]
        if not involved or func in _METADATA or _harmless_attribute(func) or (func in _MEMORY
                                                                             and _asked_by_triton()):
            return func(*args, **kwargs)
        if func in _VIEWS and len(involved) == 1 and isinstance(involved[0], _Noise) \
                and involved[0].state == "fresh" and args and args[0] is involved[0].tensor:
            result = func(*args, **kwargs)
            tracked[id(result)] = _Derived(result, involved[0], "view")
            return result
        if func in _RECIPROCALS and len(involved) == 1 and isinstance(involved[0], _Noise) \
                and involved[0].state == "fresh" and len(args) == 1 and args[0] is involved[0].tensor and not kwargs:
            noise = involved[0]
            result = func(*args)
            if rng_triton.invert(capture, noise.tensor, result):
                noise.state = "inverted"
                tracked[id(result)] = _Derived(result, noise, "inverse")
            else:
                noise.state = "impure"
            return result
        if func in _DIVISIONS and len(args) == 2 and not kwargs:
            noise = tracked.get(id(args[1]))
            if isinstance(noise, _Noise) and noise.state == "fresh" and len(involved) == 1:
                weights = _weights_at_division(args[0], tuple(noise.tensor.shape))  # before an in-place division
                current = rng_triton.lookup(capture, noise.tensor)
                if current is not None:  # the noise as it is now: rows refilled from their own generators
                    noise.uniforms, noise.columns = current
                elif noise.uniforms is None:  # a buffer some of whose elements no exponential_ wrote
                    weights = None
                result = func(*args)
                noise.state = "divided"
                if tuple(result.shape) == tuple(noise.tensor.shape) and weights is not None:
                    tracked[id(result)] = _Score(result, noise, weights)
                else:
                    noise.state = "impure"
                return result
        if func in _ARGMAXES and len(involved) == 1 and isinstance(involved[0], _Score):
            score = involved[0]
            if score.state == "fresh" and score.noise.state == "divided" and args[0] is score.tensor:
                dim = args[1] if len(args) > 1 else kwargs.get("dim")
                keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
                drawn = self.race(score, dim, bool(keepdim))
                if drawn is not None:
                    return drawn
        for item in involved:
            if isinstance(item, _Derived):
                item.state = item.noise.state = "impure"
                rng_triton.forget(capture, item.tensor)
                rng_triton.forget(capture, item.noise.tensor)
                continue
            if item.state == "raced":
                noise = item.noise if isinstance(item, _Score) else item
                raise rules.Signal(NotPiecewiseConstantError(
                    f"exact mode cannot integrate {capture.name}: the exponential noise drawn at {noise.site} is "
                    "raced by argmax and then read again, so its race cannot be read as one categorical draw: "
                    "use --mode blackbox"))
            item.state = "impure"
            if isinstance(item, _Score):
                item.noise.state = "impure"
            rng_triton.forget(capture, item.noise.tensor if isinstance(item, _Score) else item.tensor)
        return func(*args, **kwargs)

    def race(self, score: _Score, dim, keepdim: bool):
        """argmax(w / E, dim) as one inverse-CDF draw from w along ``dim`` (None where the rule does not hold)."""
        capture, noise = self.capture, score.noise
        shape = tuple(noise.tensor.shape)
        if dim is None and len(shape) == 1 and capture.tape.rows == 1:
            dim = 0  # argmax without dim over one row's noise: the same race along its only dimension
        if dim is None or not shape:
            return None
        dim = int(dim) % len(shape)
        batched = capture.tape.rows > 1
        if batched and dim == 0:
            return None
        weights = score.weights
        if len(shape) == 1:  # one slice: the common case of a row at a time
            flat, first, columns = weights[None, :], noise.uniforms[:1], noise.columns[1:]
        else:
            moved = np.moveaxis(weights, dim, -1)  # [..., V]
            flat = moved.reshape(-1, shape[dim])
            first = np.moveaxis(noise.uniforms, dim, -1)[..., 0].reshape(-1)
            columns = np.moveaxis(noise.columns, dim - 1 if batched else dim, -1)[..., 1:]
        read = noise.columns.reshape(-1)
        if np.any(capture.tape.reads[read] > 1):  # its noise is read by another draw too (through a key): the
            return None  # two uses are not independent, so the race stays real (exact mode cannot integrate it)
        capture.tape.raced[read] = True  # and no later draw may read it by its key (Tape.take_keyed)
        tokens = inverse_cdf(flat, first)  # [slices]
        tokens[flat.sum(axis=1) <= 0] = 0  # argmax of all-zero scores is the first index
        if not batched:  # the noise is followed from here on: the token is all the code learns of each first uniform
            capture.know_categorical(noise.columns[:1] if len(shape) == 1
                                     else np.moveaxis(noise.columns, dim, -1)[..., 0].reshape(-1), flat)
        tokens = tokens.reshape(shape[:dim] + shape[dim + 1:])
        if keepdim:
            tokens = np.expand_dims(tokens, dim)
        capture.chose(tokens)
        capture.tape.used[columns.reshape(-1)] = False
        noise.state = score.state = "raced"
        capture.races_read += 1
        return torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64)).to(score.tensor.device)


#: (seed, device) -> (the state of a generator just seeded with it, the state after one draw from it).
_SEEDED_STATES: dict = {}


def generator_stream(streams: dict, generator):
    """The keyed stream [key, next index, generator] a draw from torch ``generator`` reads this call, or None
    (fresh uniforms) for a generator whose state verispec cannot place.

    verispec's draws never advance a generator, so one seeded since its last draw (inside the call or before it;
    ``torch.Generator()`` unseeded holds its fixed default seed) is in exactly the state ``manual_seed`` leaves:
    its draws start the stream of key ("torch", seed) at index 0. Its state is then set to the state after one
    real draw, so a later ``manual_seed`` with the same seed is seen again as a new start (the stream read
    again from index 0: the reuse engines ship). A generator in any other state (one drawn from before the
    call, whose position verispec cannot know) gets fresh uniforms."""
    seed = int(generator.initial_seed())
    device = str(generator.device)
    states = _SEEDED_STATES.get((seed, device))
    if states is None:
        if len(_SEEDED_STATES) > 4096:
            _SEEDED_STATES.clear()
        with torch._C.DisableTorchFunction():  # the real generator, not verispec's replacements
            probe = torch.Generator(device=device)
            probe.manual_seed(seed)
            fresh = probe.get_state()
            torch._C.TensorBase.uniform_(torch.empty(1, device=device), generator=probe)
            states = _SEEDED_STATES[(seed, device)] = (fresh, probe.get_state())
    state = generator.get_state()
    if state.equal(states[0]):
        streams[id(generator)] = stream = [("torch", seed), 0, generator]
        generator.set_state(states[1])
        return stream
    stream = streams.get(id(generator))
    if stream is not None and stream[2] is generator and state.equal(states[1]):
        return stream
    return None


def table(feed: FeedMode) -> list:
    """(owner, attribute, replacement) for every primitive: module functions, and Tensor methods as plain
    functions (so that the tensor is passed as the first argument)."""
    entries = []
    for func, handler in feed.handlers.items():
        owner = Tensor if func.__qualname__.startswith("TensorBase.") else torch
        entries.append((owner, func.__name__, handler if owner is torch else _method(handler)))
    for func, what in _REFUSED.items():
        owner = (Tensor if func.__qualname__.startswith("TensorBase.") else torch.nn.functional
                 if "dropout" in what else torch)
        replacement = _refusing(feed, func)
        entries.append((owner, func.__name__, replacement if owner is not Tensor else _method(replacement)))
    return entries


def _refusing(feed, func):
    def replacement(*args, **kwargs):
        return feed.__torch_function__(func, (), args, kwargs)
    return replacement


def _method(handler):
    def method(self, *args, **kwargs):
        return handler(self, *args, **kwargs)
    return method


def _uniform_like(values: np.ndarray, dtype, device):
    """float64 uniforms as a tensor of ``dtype``: on the CPU generator's grid for float32 (``rules.on_grid``), else
    rounded down (so they stay below 1)."""
    if dtype == torch.float32:
        return torch.from_numpy(rules.on_grid(values, np.float32)).to(device=device)
    return _as_tensor(values, dtype, device, down=True)


def _as_tensor(values, dtype, device, down=False):
    values = np.asarray(values)
    if dtype == torch.float64 or not dtype.is_floating_point:
        out = torch.from_numpy(np.ascontiguousarray(values.astype(np.float64) if dtype.is_floating_point
                                                    else values))
        return out.to(dtype=dtype, device=device)
    if not down:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(dtype=dtype, device=device)
    if dtype == torch.float16:
        return torch.from_numpy(rules.round_down(values, np.float16)).to(device=device)
    single = rules.round_down(values, np.float32)
    if dtype == torch.bfloat16:  # truncating a float32's low 16 bits rounds a non-negative value down
        single = (single.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return torch.from_numpy(single).to(dtype=dtype, device=device)


def _size_of(args, kwargs, start=0):
    if "size" in kwargs:
        size = kwargs["size"]
    elif len(args) > start and isinstance(args[start], (tuple, list, torch.Size)):
        size = args[start]
    else:
        size = args[start:]
    return tuple(int(s) for s in size)


def _finish(result, kwargs):
    out = kwargs.get("out")
    if out is not None:
        out.resize_(result.shape)
        out.copy_(result)
        return out
    if kwargs.get("requires_grad"):
        result.requires_grad_()
    return result


def _weights_at_division(weights, shape: tuple):
    """w of ``w / E`` as it is now (a float64 copy of shape ``shape``: later writes into w must not reach the
    race), or None where the race rule does not hold (w not finite and >= 0, or not of E's shape)."""
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy()
    weights = np.array(weights, dtype=np.float64)  # a copy, also of a CPU tensor's memory
    if weights.shape != shape:
        try:
            weights = np.broadcast_to(weights, shape).copy()
        except ValueError:
            return None
    if weights.size and not (np.isfinite(weights).all() and weights.min() >= 0):
        return None
    return weights


def _asked_by_triton() -> bool:
    """Whether the torch call being followed comes from Triton's runtime (its interpreter launching a kernel)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return False
        if frame.f_globals.get("__name__", "").startswith("triton.runtime"):
            return True
        frame = frame.f_back
    return False


def _harmless_attribute(func) -> bool:
    owner = getattr(func, "__self__", None)
    return getattr(func, "__name__", "") == "__get__" and getattr(owner, "__name__", "") in _METADATA_ATTRIBUTES


def _involved(tracked: dict, args, kwargs) -> list:
    """What ``tracked`` holds for the arguments of a torch call (one level into tuples and lists): the followed
    tensors among them. Every torch operation of a call that drew noise passes here, so it is written out flat."""
    found = []
    for values in (args, kwargs.values()) if kwargs else (args,):
        for value in values:
            if type(value) is tuple or type(value) is list:
                for item in value:
                    entry = tracked.get(id(item))
                    if entry is not None:
                        found.append(entry)
            else:
                entry = tracked.get(id(value))
                if entry is not None:
                    found.append(entry)
    return found


_BASELINE_USES = None


def _filled_in_parts(base) -> bool:
    """Whether ``base``, the base of a view that ``exponential_`` fills, is a CPU buffer torch allocated whose
    storage only it and that view hold (so every later read of it goes through torch, and is followed)."""
    if base._base is not None or base.device.type != "cpu" or not base.untyped_storage().resizable():
        return False
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return False
    return count(base.untyped_storage()._cdata) <= _baseline_uses(count) + 1


def _own_storage(tensor) -> bool:
    """Whether no other tensor shares ``tensor``'s storage, and torch allocated it (so reading its values goes
    through torch and this tensor alone; see "Shared memory" in ``docs/guides/check_external.md``'s glossary)."""
    if tensor._base is not None or not tensor.untyped_storage().resizable():  # a view, or memory torch did not
        return False  # allocate (torch.from_numpy, DLPack), which may be read without torch
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return False
    storage = tensor.untyped_storage()
    return count(storage._cdata) <= _baseline_uses(count)


def _baseline_uses(count) -> int:
    """A fresh tensor's storage use count (references held while counting), measured once."""
    global _BASELINE_USES

    if _BASELINE_USES is None:
        fresh = torch.empty(1)
        fresh_storage = fresh.untyped_storage()
        _BASELINE_USES = count(fresh_storage._cdata)
    return _BASELINE_USES
