"""What a model call costs: a price table per model, in US dollars per million tokens.

The table ships with the current Claude models' list prices (platform.claude.com, model overview pages,
checked 2026-11) and any entry can be replaced, or a model added, in the config:

    [prices."claude-sonnet-5-5"]
    input = 2.0          # base input tokens
    output = 10.0
    cache_write = 2.5    # 5-minute cache writes; left out: 1.25 x input
    cache_read = 0.2     # cache hits; left out: 0.1 x input

A model with no price has an unknown cost, never a zero one: a sum that left it out would read as less
than was spent. Costs are whole nano-dollars (1e-9 USD), so that sums and budget checks are exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NANOS_PER_USD = 1_000_000_000
# A price is per million tokens: tokens x price / 1e6 dollars = tokens x price x 1000 nano-dollars.
_NANOS_PER_TOKEN_AT_ONE_USD_PER_MTOK = NANOS_PER_USD / 1_000_000
CACHE_WRITE_FACTOR = 1.25  # a 5-minute cache write, as a multiple of the base input price
CACHE_READ_FACTOR = 0.1    # a cache hit
MAX_PRICE = 100_000.0      # USD per million tokens: far above any model, well inside exact float arithmetic


@dataclass(frozen=True)
class Usage:
    """The tokens one model call was billed for, as the Messages API's `usage` reports them. input_tokens
    are those after the last cache breakpoint; the cache's tokens are counted apart."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0  # usage.cache_creation_input_tokens
    cache_read_tokens: int = 0   # usage.cache_read_input_tokens

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens


@dataclass(frozen=True)
class Price:
    """USD per million tokens. long_prompt, when set, is the price of a call whose prompt (input, cache
    reads and cache writes) is over long_prompt_tokens, on every token of that call."""

    input: float
    output: float
    cache_write: float
    cache_read: float
    long_prompt_tokens: int | None = None
    long_prompt: Price | None = None

    def band(self, prompt_tokens: int) -> Price:
        if self.long_prompt is not None and self.long_prompt_tokens is not None and (
                prompt_tokens > self.long_prompt_tokens):
            return self.long_prompt
        return self

    def cost_nanos(self, usage: Usage) -> int:
        """What a call with this usage cost, to the nearest nano-dollar."""
        price = self.band(usage.prompt_tokens)
        total = (usage.input_tokens * price.input + usage.output_tokens * price.output
                 + usage.cache_write_tokens * price.cache_write + usage.cache_read_tokens * price.cache_read)
        return round(total * _NANOS_PER_TOKEN_AT_ONE_USD_PER_MTOK)

    def worst_case_nanos(self, prompt_tokens: int, max_tokens: int) -> int:
        """The most a call can cost: every prompt token at the dearer of input and cache write (a
        breakpoint may write it all), and max_tokens of output, rounded up."""
        price = self.band(prompt_tokens)
        total = prompt_tokens * max(price.input, price.cache_write) + max_tokens * price.output
        return math.ceil(total * _NANOS_PER_TOKEN_AT_ONE_USD_PER_MTOK)


def _flat(input_usd: float, output_usd: float, cache_write: float | None = None,
          cache_read: float | None = None) -> Price:
    return Price(input_usd, output_usd,
                 input_usd * CACHE_WRITE_FACTOR if cache_write is None else cache_write,
                 input_usd * CACHE_READ_FACTOR if cache_read is None else cache_read)


# List prices, USD per million tokens: input, output, 5-minute cache write, cache read.
SHIPPED_PRICES: dict[str, Price] = {
    "claude-opus-5-5": _flat(4.0, 20.0, 5.0, 0.20),
    "claude-opus-5": _flat(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-8": _flat(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-7": _flat(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-6": _flat(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-5": _flat(5.0, 25.0, 6.25, 0.50),
    # Sonnet 5.5's page lists cache reads at $0.20; some trackers report a cut to $0.10. The higher one is
    # kept: a budget must not be passed because a price was read too low.
    "claude-sonnet-5-5": _flat(2.0, 10.0, 2.50, 0.20),
    "claude-sonnet-5": _flat(2.0, 10.0, 2.50, 0.20),
    "claude-sonnet-4-6": _flat(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": _flat(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-5-5": Price(0.10, 0.50, 0.125, 0.01, long_prompt_tokens=100_000,
                              long_prompt=_flat(0.50, 2.50, 0.625, 0.05)),
    "claude-haiku-4-5": _flat(1.0, 5.0, 1.25, 0.10),
}


class PriceTable:
    """The shipped prices with the config's [prices."model-id"] entries over them."""

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self.prices: dict[str, Price] = {**SHIPPED_PRICES, **(overrides or {})}

    @classmethod
    def from_config(cls, table: Mapping[str, Any]) -> PriceTable:
        return cls(parse_prices(table))

    def price(self, model: str) -> Price | None:
        """The model's price, or None when it has none. A dated snapshot id (claude-sonnet-5-5-20261001)
        takes the price of the id it extends, unless it has its own."""
        found = self.prices.get(model)
        if found is not None:
            return found
        stems = [stem for stem in self.prices if model.startswith(stem + "-") and model[len(stem) + 1:].isdigit()]
        return self.prices[max(stems, key=len)] if stems else None


PRICE_FIELDS = ("input", "output", "cache_write", "cache_read")


def parse_prices(table: Mapping[str, Any]) -> dict[str, Price]:
    """The config's [prices] table: model id -> {input, output[, cache_write, cache_read]} in USD per million
    tokens. Raises ValueError naming the model and field at fault."""
    parsed: dict[str, Price] = {}
    for model, entry in table.items():
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"a model id must be non-empty text, got {model!r}")
        if not isinstance(entry, Mapping):
            raise ValueError(f"[prices.{model!r}] must be a table of input, output, cache_write and cache_read")
        unknown = sorted(set(entry) - set(PRICE_FIELDS))
        if unknown:
            raise ValueError(f"[prices.{model!r}] has unknown field {unknown[0]!r} "
                             f"(known: {', '.join(PRICE_FIELDS)}, in USD per million tokens)")
        values: dict[str, float] = {}
        for name in PRICE_FIELDS:
            if name not in entry:
                if name in ("input", "output"):
                    raise ValueError(f"[prices.{model!r}] needs {name} (USD per million tokens)")
                continue
            value = entry[name]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"[prices.{model!r}] {name} must be a number of USD per million tokens, "
                                 f"got {value!r}")
            if not 0 <= value <= MAX_PRICE:
                raise ValueError(f"[prices.{model!r}] {name} must be between 0 and {MAX_PRICE:g}, got {value!r}")
            values[name] = float(value)
        parsed[model.strip()] = _flat(values["input"], values["output"], values.get("cache_write"),
                                      values.get("cache_read"))
    return parsed
