"""What hardware costs today (hardware_db/prices/, or a --prices FILE.yaml of the same schema): the price a
buyer pays for a card or a unified-memory machine, with its date and source."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from pydantic import ValidationError

from gemma_fit.base.errors import BadInput, DatabaseError
from gemma_fit.base.record import record
from gemma_fit.base.suggest import did_you_mean
from gemma_fit.db.files import read_text, shown
from gemma_fit.db.yaml_files import parse_yaml
from gemma_fit.db.yaml_lines import format_validation, line_of
from gemma_fit.hardware.catalog import classify, load_hardware_db
from gemma_fit.hardware.price_schema import PowerFigure, PriceEntry, PriceFile, PricePoint

# A launch MSRP older than this is not a price anyone sells the part at new; street and used prices are.
MSRP_MAX_AGE_YEARS = 3


@record
class Price:
    usd: float
    date: str  # as its source dates it: YYYY, YYYY-Qn, YYYY-MM or YYYY-MM-DD
    source: str
    kind: str  # "street", "msrp" or "used"


def price_month(day: str) -> str:
    """YYYY-MM of a price date: a quarter is its first month, a year its January."""
    if "-Q" in day:
        return f"{day[:4]}-{3 * int(day[-1]) - 2:02d}"
    return day[:7] if len(day) > 4 else f"{day}-01"


def price_table(extra_dirs: tuple[Path, ...] = (), prices_file: Path | None = None) -> dict[str, PriceEntry]:
    """Every price entry by GPU id: the database's, with `prices_file`'s entries replacing theirs."""
    table = dict(load_hardware_db(extra_dirs).prices)
    if prices_file is not None:
        table.update(read_prices_file(prices_file, extra_dirs))
    return table


# A --prices file has an entry per GPU the database knows (a few hundred) with a few dated points each: far less than
# this, which bounds the time to read and validate one (a 15 MB file of repeated entries took 34 s and 1.1 GiB).
MAX_PRICES_FILE_BYTES = 1024 * 1024
MAX_PRICES_FILE_NODES = 200_000


def read_prices_file(path: Path, extra_dirs: tuple[Path, ...] = ()) -> dict[str, PriceEntry]:
    """--prices FILE.yaml: `prices:` entries in the database's schema, read as a file a person wrote (as machine and
    cluster files are): a key once per mapping, no coercion (`true` and "999" are not prices), numbers inside
    base.ranges, each id once and one the hardware database has. Anything else is one line, exit 2."""
    if not Path(path).is_file():
        raise BadInput(f"--prices {path}: not a file")
    try:
        data, root = parse_yaml(read_text(Path(path), MAX_PRICES_FILE_BYTES), Path(path), unique_keys=True,
                                max_nodes=MAX_PRICES_FILE_NODES)
    except DatabaseError as exc:
        raise BadInput(f"--prices {exc}") from None
    where = shown(path)
    if classify(data) != "prices":
        raise BadInput(f"--prices {where}: expected a 'prices:' list (the schema of hardware_db/prices/)")
    try:
        parsed = PriceFile.model_validate(data, strict=True)
    except ValidationError as exc:
        lines = format_validation(Path(where), exc, data, root, models=[PriceEntry, PricePoint, PowerFigure])
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        raise BadInput(f"--prices {lines[0]}{more}") from None
    known = load_hardware_db(extra_dirs).gpus
    out: dict[str, PriceEntry] = {}
    for i, entry in enumerate(parsed.prices):
        line = line_of(root, ("prices", i))
        at = f"--prices {where}:{line}: prices[{i}]" if line else f"--prices {where}: prices[{i}]"
        if entry.id not in known:  # a price for nothing the database has would be dropped without a word
            raise BadInput(f"{at}: id {entry.id} is not a GPU of the hardware database (see gemma-fit list gpus)"
                           f"{did_you_mean(entry.id, known)}")
        if entry.id in out:  # the later entry would silently win
            raise BadInput(f"{at}: a second entry for {entry.id}: give each id once")
        out[entry.id] = entry
    return out


def prices_as_of(table: dict[str, PriceEntry]) -> date:
    """The date the prices speak for: the month of the newest price in the table (not the clock, so that an
    answer does not change with the day it is asked; a --prices file with newer prices moves it)."""
    months = [price_month(p.date) for e in table.values() for p in (e.msrp, e.street, e.used) if p is not None]
    newest = max(months, default="2026-12")
    return date(int(newest[:4]), int(newest[5:7]), 1)


def current_price(entry: PriceEntry, today: date, used: bool = False) -> Price | None:
    """What a buyer pays: new, the most recently dated of the street price and a launch MSRP of the last
    MSRP_MAX_AGE_YEARS years (a street price after a price rise replaces the MSRP); with `used`, the used price
    where it is lower. A product no longer sold new has no MSRP price: its dated street price, else its used
    price. None when there is none."""
    new = []
    if entry.street is not None:
        new.append(Price(entry.street.usd, entry.street.date, entry.street.source, "street"))
    if entry.msrp is not None and price_month(entry.msrp.date) >= f"{today.year - MSRP_MAX_AGE_YEARS}-{today:%m}" \
            and not is_discontinued(entry, today):
        new.append(Price(entry.msrp.usd, entry.msrp.date, entry.msrp.source, "msrp"))
    options = [max(new, key=lambda p: (price_month(p.date), p.kind == "street"))] if new else []
    second_hand = used_price(entry)
    if second_hand is not None and (used or (not options and is_discontinued(entry, today))):
        options.append(second_hand)
    return min(options, key=lambda p: p.usd, default=None)


def used_price(entry: PriceEntry) -> Price | None:
    """The used price, shown beside the new one."""
    u = entry.used
    return None if u is None else Price(u.usd, u.date, u.source, "used")


def is_discontinued(entry: PriceEntry, today: date) -> bool:
    return entry.discontinued is not None and price_month(entry.discontinued.date) <= f"{today:%Y-%m}"
