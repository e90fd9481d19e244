"""`gemma-fit cost`: buy vs rent vs a hosted API, on made-up prices whose arithmetic a reader can redo
(tests/data/costdb), and the real database's prices validated (dated, sourced)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gemma_fit.jobs.cost import AMORTISATION_MONTHS, DAYS_PER_MONTH

DB = Path(__file__).parent / "data" / "costdb"
CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def cost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "--hardware-db", str(DB), "cost", *args], capture_output=True, text=True,
                          timeout=300, check=False)


def test_cost_document_and_its_arithmetic() -> None:
    proc = cost("--model", "gemma-3-27b", "--gpu", "rtx-4090", "--tokens-per-day", "20000000", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gemma-fit.cost/1" and doc["workload"] == {"tokens_per_day": 20_000_000}
    assert {o["kind"] for o in doc["options"]} == {"buy", "rent", "api"}
    # the made-up prices of tests/data/costdb (the database's own are ranked beside them)
    opts = {"api": next(o for o in doc["options"] if o["label"] == "API: TestAPI"),
            "rent": next(o for o in doc["options"] if "(TestCloud)" in o["label"]),
            "buy": next(o for o in doc["options"] if o["kind"] == "buy")}
    assert [o["usd_per_mtok"] for o in doc["options"]] == sorted(o["usd_per_mtok"] for o in doc["options"])
    assert doc["cheapest"] == doc["options"][0]["label"]
    for o in doc["options"]:
        assert set(o) >= {"kind", "label", "usd_per_mtok", "energy_wh_per_mtok", "upfront_usd", "hourly_usd",
                          "breakeven_months", "sources"}
        assert all(s["date"] and s["what"] for s in o["sources"])
    # the API: $0.20 per M output + 2 prompt tokens per output token x $0.10 per M input = $0.40 per M
    assert opts["api"]["usd_per_mtok"] == pytest.approx(0.40)
    # renting: $0.50 an hour for the whole hours the volume needs on one GPU at the plan's throughput
    tps = doc["throughput_tokens_per_s"]
    hours = min(24, -(-20_000_000 // (tps * 3600)))
    assert opts["rent"]["usd_per_day"] == pytest.approx(0.5 * hours, abs=0.01)
    # buying: the price over 36 months plus the board's 450 W while generating at the default kWh price
    buy = opts["buy"]
    assert doc["kwh_price_usd"] == 0.17  # the extra folder's default electricity price, not the built-in one
    energy_usd_per_mtok = 450 / (tps * 3600) * 1e6 / 1000 * doc["kwh_price_usd"]
    assert buy["energy_wh_per_mtok"] == pytest.approx(450 / (tps * 3600) * 1e6, rel=1e-3)
    per_day = buy["upfront_usd"] / (AMORTISATION_MONTHS * DAYS_PER_MONTH) + 20 * energy_usd_per_mtok
    assert buy["usd_per_day"] == pytest.approx(per_day, abs=0.01)
    # break-even against the cheapest alternative: the purchase over the daily saving
    rival = min((o for o in doc["options"] if o["kind"] != "buy"), key=lambda o: o["usd_per_day"])
    assert buy["breakeven_against"] == rival["label"]
    saving = rival["usd_per_day"] - 20 * energy_usd_per_mtok
    assert buy["breakeven_months"] == pytest.approx(buy["upfront_usd"] / saving / DAYS_PER_MONTH, abs=0.1)
    # the cheapest option changes with the volume: an API at a few thousand tokens a day, buying at billions
    kinds = [c["cheapest"].split()[0] for c in doc["changes"]]
    assert kinds[0] == "API:" and kinds[-1] == "buy"


def test_cost_for_users() -> None:
    proc = cost("--model", "gemma-3-27b", "--gpu", "rtx-4090", "--users", "4", "--tokens-per-request", "500",
                "--requests-per-user", "100", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["workload"]["tokens_per_day"] == 200_000


@pytest.mark.parametrize("args", [
    (),  # no volume
    ("--tokens-per-day", "1000", "--users", "3", "--tokens-per-request", "10"),
    ("--users", "3",),
    ("--tokens-per-day", "0"),
    ("--tokens-per-day", "1000", "--kwh-price", "-1"),
    ("--tokens-per-day", "1000", "--hours-per-day", "25"),
    ("--tokens-per-day", "1000", "--gpu", "no-such-gpu"),
])
def test_cost_bad_input_is_one_line(args: tuple[str, ...]) -> None:
    base = ["--model", "gemma-3-27b"] + ([] if "--gpu" in args else ["--gpu", "rtx-4090"])
    proc = cost(*base, *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_buy_leads_with_the_whole_cost_and_the_pages_draw_the_chart(tmp_path: Path) -> None:
    page = tmp_path / "buy.html"
    proc = subprocess.run([*CLI, "--hardware-db", str(DB), "buy", "--model", "gemma-3-27b", "--ctx", "8k", "--segment",
                           "consumer", "--tokens-per-day", "20000000", "--html", str(page), "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    first = next(o for o in doc["options"] if o["model"])
    assert doc["cost"]["schema"] == "gemma-fit.cost/1" and doc["cost"]["model"] == first["model"]
    html = page.read_text()
    assert html.index('id="cost"') < html.index('id="options"') and html.count("<polyline") >= 2
    cost_page = tmp_path / "cost.html"
    proc = cost("--model", "gemma-3-27b", "--gpu", "rtx-4090", "--tokens-per-day", "20000000", "--html", str(cost_page))
    assert proc.returncode == 0, proc.stderr
    assert "<polyline" in cost_page.read_text() and "Cheapest:" in cost_page.read_text()


def test_two_default_electricity_prices_are_one_problem() -> None:
    builtin = Path(__file__).parent.parent / "hardware_db" / "prices"
    proc = subprocess.run([*CLI, "db", "validate", str(DB), str(builtin)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode != 0 and "a second default electricity price" in proc.stdout + proc.stderr


@pytest.mark.parametrize(("typed", "tokens"), [("20M", 20_000_000), ("2.5M", 2_500_000), ("500k", 500_000),
                                               ("1G", 1_000_000_000), ("1000", 1000)])
def test_a_daily_volume_is_decimal_as_api_prices_count_it(typed: str, tokens: int) -> None:
    """--tokens-per-day 1M is a million tokens (what a hosted API's price per 1M counts), not 2^20."""
    from gemma_fit.cli.values import volume_count

    assert volume_count(typed) == tokens


@pytest.mark.parametrize("typed", ["1.5", "abc", "-5", "1.0000001M", "5 T"])
def test_a_daily_volume_that_is_not_one_is_refused(typed: str) -> None:
    from gemma_fit.cli.values import volume_count

    with pytest.raises(ValueError, match="token"):
        volume_count(typed)
