"""The price schema (hardware_db/prices/, and a --prices FILE.yaml): what a GPU or unified-memory machine costs,
dated and sourced. Numbers go through base.ranges (a cent at least, a watt at least), dates are calendar dates."""

from __future__ import annotations

import datetime
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from gemma_fit.db.schema import Strict
from gemma_fit.hardware.schema import SLUG, ranged

# Where a price was read: a web page (http or https only: a page or tool that links it follows it), or a few words of
# text that name no other scheme ("my local shop, receipt of 2026-11-02"; `javascript:` and `data:` are refused).
_URL = re.compile(r"https?://\S+")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _source(value: str) -> str:
    if _URL.fullmatch(value):
        return value
    if _SCHEME.match(value) or len(value) < 8 or any(ord(ch) < 32 for ch in value):
        raise PydanticCustomError("price_source", "a source is an http(s) URL or at least 8 characters of text that "
                                  "name no other scheme (javascript:, data:, file: ...)")
    return value


Source = Annotated[str, AfterValidator(_source)]

# A price's date: a year, a quarter (2026-Q1), a month or a day, as its source states it. ASCII digits only
# ([0-9], not \d, which also takes Arabic-Indic and other digits), and a day that is on the calendar.
PRICE_DATE = r"^[0-9]{4}(-Q[1-4]|-(0[1-9]|1[0-2])(-(0[1-9]|[12][0-9]|3[01]))?)?$"
PRICE_YEARS = (1990, 2100)  # GPUs have been sold since the 1990s; a year outside is a typo (0000, 20026)


def _price_date(value: str) -> str:
    year = int(value[:4])
    if not PRICE_YEARS[0] <= year <= PRICE_YEARS[1]:
        raise PydanticCustomError("price_date", "year {year} is impossible ({low} to {high})",
                                  {"year": value[:4], "low": PRICE_YEARS[0], "high": PRICE_YEARS[1]})
    if len(value) == 10:
        try:
            datetime.date(year, int(value[5:7]), int(value[8:10]))
        except ValueError:
            raise PydanticCustomError("price_date", "{day} is not a day of the calendar", {"day": value}) from None
    return value


PriceDate = Annotated[str, Field(pattern=PRICE_DATE), AfterValidator(_price_date)]


class PricePoint(Strict):
    """One price in US dollars, as dated by its source."""

    usd: Annotated[float, ranged("usd")]
    date: PriceDate
    source: Source


class Discontinued(Strict):
    """When the maker stopped selling it new (its successor's launch, or the end of production), and who says so."""

    date: PriceDate
    source: Source


class PowerFigure(Strict):
    w: Annotated[float, ranged("power_w")]
    source: Source


class PriceEntry(Strict):
    """What one database GPU (a card) or unified-memory chip (the cheapest whole machine with it) costs:
    launch MSRP and dated street and used prices, each with its source (hardware_db/prices/)."""

    id: str = Field(pattern=SLUG)  # a gpus id
    segment: Literal["consumer", "workstation", "datacenter", "apple", "embedded"]
    machine: str | None = None  # unified memory: the machine the price buys (model, cores, memory, storage)
    msrp: PricePoint | None = None
    street: PricePoint | None = None  # new, retail
    used: PricePoint | None = None
    power: PowerFigure | None = None  # a whole machine's rated or measured maximum at the wall
    discontinued: Discontinued | None = None  # no longer sold new: its launch MSRP no longer prices it
    note: str = ""

    @model_validator(mode="after")
    def _priced_or_said(self) -> PriceEntry:
        if self.msrp is None and self.street is None and self.used is None and not self.note:
            raise ValueError("no price: give msrp, street or used, or a note saying none was found")
        return self


class PriceFile(Strict):
    prices: list[PriceEntry] = Field(min_length=1)


# What running costs: renting GPUs by the hour, a hosted API by the token, electricity by the kWh (`gemma-fit cost`).
# Every figure is a PricePoint: USD, the date its source states, and the source (a URL).
URL = r"^https?://[^\s]+\.[^\s]+$"


class SourcedPrice(Strict):
    """A price that only a public page can state: its URL is required (db validate checks its form)."""

    usd: Annotated[float, ranged("usd")]
    date: PriceDate
    source: str = Field(pattern=URL)


class RentEntry(Strict):
    """An on-demand cloud instance: its GPUs (a hardware_db id and how many) and its price per instance-hour."""

    id: str = Field(pattern=SLUG)  # provider-product, e.g. lambda-1x-h100-sxm
    gpu: str = Field(pattern=SLUG)  # a gpus id
    gpus: Annotated[int, Field(ge=1, le=16)]
    provider: str = Field(min_length=2, max_length=60)
    product: str = Field(min_length=2, max_length=120)
    per_hour: SourcedPrice  # the whole instance, on demand
    region: str = ""
    note: str = ""


class RentFile(Strict):
    rent: list[RentEntry] = Field(min_length=1)


class ApiEntry(Strict):
    """A hosted API serving a Gemma model: USD per million input and output tokens."""

    id: str = Field(pattern=SLUG)  # provider-model, e.g. deepinfra-gemma-3-27b
    model: str = Field(pattern=r"^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$")  # a model_db id, as it is spelled there
    provider: str = Field(min_length=2, max_length=60)
    input_per_mtok: SourcedPrice
    output_per_mtok: SourcedPrice
    note: str = ""


class ApiFile(Strict):
    api: list[ApiEntry] = Field(min_length=1)


class ElectricityEntry(Strict):
    """An average electricity price (USD per kWh) for a region and sector."""

    id: str = Field(pattern=SLUG)  # us-residential
    region: str = Field(min_length=2, max_length=60)
    per_kwh: SourcedPrice
    default: bool = False  # the one `cost` uses without --kwh-price
    note: str = ""


class ElectricityFile(Strict):
    electricity: list[ElectricityEntry] = Field(min_length=1)
