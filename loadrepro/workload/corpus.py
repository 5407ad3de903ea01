"""The record pool: invented business records (customers, orders, tickets, log lines, tool results) from faker.

faker is slow, so a pool is generated once per seed and conversations are assembled from it by index. faker's
output can change between its versions, so the version is pinned and recorded with every workload.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from loadrepro.workload.pool_cache import pool_texts

if TYPE_CHECKING:
    from faker import Faker

FAKER_VERSION = version("faker")  # faker itself is imported only when a pool is invented (0.1 s)
POOL_SIZE = 2048

_PRIORITIES = ("P1", "P2", "P3", "P4")
_LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR", "DEBUG")
_SERVICES = ("billing", "checkout", "inventory", "auth", "search", "shipping", "ledger")
_STATUSES = ("pending", "paid", "shipped", "delivered", "refunded", "on_hold")
_TOOLS = ("lookup_account", "search_orders", "get_ticket", "fetch_invoice", "list_shipments")
# faker's own date providers draw relative to today; fixed origins keep a seed's records the same on every day.
_DAY_ZERO = date(2015, 1, 1)
_SECOND_ZERO = datetime(2025, 1, 1)


def _date(f: Faker) -> str:
    return (_DAY_ZERO + timedelta(days=f.random_int(0, 4000))).isoformat()


def _timestamp(f: Faker) -> str:
    return (_SECOND_ZERO + timedelta(seconds=f.random_int(0, 365 * 86400), microseconds=f.random_int(0, 999999))
            ).isoformat()


def _customer(f: Faker) -> str:
    return (f"CUSTOMER {f.bothify('C-#####')} | {f.name()} | {f.email()} | {f.phone_number()} | "
            f"{f.city()}, {f.country()} | tier={f.random_element(('gold', 'silver', 'basic'))} | "
            f"since {_date(f)} | note: {f.sentence(nb_words=10)}")


def _order(f: Faker) -> str:
    return (f"ORDER {f.bothify('O-########')} customer={f.bothify('C-#####')} date={_date(f)} "
            f"items={f.random_int(1, 12)} total={f.pyfloat(min_value=5, max_value=5000, right_digits=2)} "
            f"{f.currency_code()} status={f.random_element(_STATUSES)} "
            f"ship_to=\"{f.address().replace(chr(10), ', ')}\"")


def _ticket(f: Faker) -> str:
    return (f"TICKET #{f.random_int(10000, 99999)} [{f.random_element(_PRIORITIES)}] "
            f"{f.sentence(nb_words=7).rstrip('.')} - reported by {f.name()} on {_date(f)}: "
            f"{f.paragraph(nb_sentences=3)}")


def _log_line(f: Faker) -> str:
    return (f"{_timestamp(f)} {f.random_element(_LEVELS)} {f.random_element(_SERVICES)}[{f.random_int(100, 9999)}]: "
            f"{f.sentence(nb_words=9)} request_id={f.uuid4()} latency_ms={f.random_int(1, 4000)}")


def _tool_result(f: Faker) -> str:
    result = {"tool": f.random_element(_TOOLS), "call_id": f.bothify("call_??##??##"),
              "result": {"account": f.bothify("A-######"), "owner": f.name(), "balance":
                         f.pyfloat(min_value=-500, max_value=90000, right_digits=2), "updated": _timestamp(f),
                         "flags": [f.word() for _ in range(f.random_int(1, 4))], "memo": f.sentence(nb_words=8)}}
    return "TOOL RESULT " + json.dumps(result, sort_keys=True)


KINDS: tuple[tuple[str, Callable[[Faker], str]], ...] = (
    ("customer", _customer), ("order", _order), ("ticket", _ticket), ("log", _log_line), ("tool", _tool_result),
)


@dataclass(frozen=True, slots=True)
class RecordPool:
    seed: int
    texts: tuple[str, ...]
    kinds: np.ndarray  # index into KINDS, one per record
    chars: np.ndarray  # characters per record

    def __len__(self) -> int:
        return len(self.texts)


def record_pool(seed: int, size: int = POOL_SIZE) -> RecordPool:
    """`size` records, the same for the same seed and faker version; kinds cycle so each is equally common."""
    texts = pool_texts(seed, size, FAKER_VERSION, Path(__file__), lambda: _invent(seed, size))
    kinds = np.arange(size) % len(KINDS)
    return RecordPool(seed, texts, kinds, np.fromiter((len(t) for t in texts), dtype=np.int64, count=size))


def _invent(seed: int, size: int) -> tuple[str, ...]:
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    return tuple(KINDS[i % len(KINDS)][1](fake) for i in range(size))
