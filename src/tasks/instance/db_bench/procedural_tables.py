"""The seeded tables of the procedural DB-bench problems (procedural_generator.py writes
the questions over them).

A table has an integer key, a unique name, two text columns with few distinct values (for
grouping), a unique integer measure, a unique real measure with two decimals and a unique
date kept as text, in one of a few themes (people, products, ...). Unique measures keep
every ORDER BY, LIMIT and MAX/MIN free of ties, so one answer is right on every server;
`below_max` and the row helpers draw thresholds from the rows, so no filter comes back
empty.
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from src.tasks.instance.db_bench.problem import Value

_FIRST_NAMES = ("Alice", "Bruno", "Chloe", "Daniel", "Elena", "Farid", "Grace", "Hiro", "Ines",
                "Jonas", "Kara", "Liam", "Maya", "Noah", "Olga", "Pedro", "Quinn", "Rosa",
                "Samir", "Tara")
_LAST_NAMES = ("Smith", "Garcia", "Chen", "O'Neil", "Novak", "Okafor", "Rossi", "Larsen",
               "Silva", "Kowalski", "Dubois", "Tanaka")
_ADJECTIVES = ("Compact", "Deluxe", "Classic", "Smart", "Rugged", "Mini", "Pro", "Eco", "Ultra",
               "Vintage")
_NOUNS = ("Blender", "Lamp", "Backpack", "Kettle", "Speaker", "Drill", "Notebook", "Camera",
          "Heater", "Puzzle", "Tent", "Monitor")
CITIES = ("New York", "San Diego", "Chicago", "Boston", "Seattle", "Austin", "Denver",
           "Portland", "Miami", "Atlanta")
_FIRST_DAY = datetime.date(2015, 1, 1)


def _person_names(rng: random.Random, count: int) -> list[str]:
    pairs = rng.sample([(first, last) for first in _FIRST_NAMES for last in _LAST_NAMES], count)
    return [f"{first} {last}" for first, last in pairs]


def _product_names(rng: random.Random, count: int) -> list[str]:
    pairs = rng.sample([(adjective, noun) for adjective in _ADJECTIVES for noun in _NOUNS], count)
    return [f"{adjective} {noun}" for adjective, noun in pairs]


@dataclass(frozen=True)
class Theme:
    entity: str
    entities: str
    table_names: tuple[str, ...]
    key: str  # integer id, 1..n
    label: str  # unique name
    group: str  # few distinct values
    place: str  # few distinct values
    count: str  # unique integer
    amount: str  # unique real, two decimals
    day: str  # unique date as text
    labels: Callable[[random.Random, int], list[str]]
    groups: tuple[str, ...]
    count_range: tuple[int, int, int]  # range() arguments
    amount_cents: tuple[int, int]
    count_alias: str
    alias: str  # a table alias


THEMES = (
    Theme("employee", "employees", ("employees", "Employee Records", "staff_list"), "id",
           "name", "department", "city", "salary", "rating", "hire_date", _person_names,
           ("Engineering", "Sales", "Marketing", "Finance", "Support"), (30000, 150000, 500),
           (100, 500), "annual_pay", "e"),
    Theme("product", "products", ("products", "Product Inventory", "store_items"),
           "product_id", "product_name", "category", "supplier_city", "stock", "price",
           "added_on", _product_names, ("Electronics", "Garden", "Kitchen", "Toys", "Books"),
           (0, 500, 1), (199, 99999), "units_in_stock", "p"),
    Theme("order", "orders", ("orders", "Customer Orders", "sales_orders"), "order_id",
           "customer", "status", "ship_city", "quantity", "total", "order_date", _person_names,
           ("Pending", "Shipped", "Delivered", "Cancelled"), (1, 400, 1), (500, 250000),
           "items", "o"),
    Theme("student", "students", ("students", "Student Roster", "enrollments"), "student_id",
           "student_name", "major", "hometown", "credits", "gpa", "enrolled_on", _person_names,
           ("Biology", "History", "Physics", "Economics", "Art"), (0, 400, 1), (150, 400),
           "credit_hours", "s"),
)
ROLES = ("key", "label", "group", "place", "count", "amount", "day")
TYPES = ("INT", "TEXT", "TEXT", "TEXT", "INT", "REAL", "DATE")


@dataclass(frozen=True)
class Row:
    key: int
    label: str
    group: str
    place: str
    count: int
    amount: float
    day: str

    def cells(self) -> tuple[Value, ...]:
        return tuple(getattr(self, role) for role in ROLES)


def literal(value: Value) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def shown(value: Value) -> str:
    """A value as the question writes it: text in single quotes."""
    if isinstance(value, str):
        return f"'{value}'"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


class TableDraw:
    """One drawn table and what templates need from it."""

    def __init__(self, theme: Theme, rng: random.Random) -> None:
        self.theme, self.rng = theme, rng
        count = rng.randint(8, 14)
        self.table_name = rng.choice(theme.table_names)
        groups = rng.sample(theme.groups, rng.randint(3, 4))
        places = rng.sample(CITIES, rng.randint(3, 4))
        labels = theme.labels(rng, count + 1)
        counts = rng.sample(range(*theme.count_range), count + 1)
        amounts = [cents / 100 for cents in rng.sample(range(*theme.amount_cents), count + 1)]
        days = [(_FIRST_DAY + datetime.timedelta(days=offset)).isoformat()
                for offset in rng.sample(range(3650), count + 1)]
        # one row more than the table holds: values that no row has, for INSERT and UPDATE
        drawn = [Row(index + 1, labels[index], rng.choice(groups), rng.choice(places),
                      counts[index], amounts[index], days[index]) for index in range(count + 1)]
        self.rows, self.spare = drawn[:-1], drawn[-1]

    # ---- names ---------------------------------------------------------------------
    def name(self, role: str) -> str:
        return str(getattr(self.theme, role))

    def c(self, role: str) -> str:
        """A column, quoted as in the benchmarks' SQL."""
        return f"`{self.name(role)}`"

    @property
    def t(self) -> str:
        return f"`{self.table_name}`"

    # ---- values --------------------------------------------------------------------
    def row(self) -> Row:
        return self.rng.choice(self.rows)

    def group_rows(self) -> dict[str, list[Row]]:
        grouped: dict[str, list[Row]] = {}
        for row in self.rows:
            grouped.setdefault(row.group, []).append(row)
        return grouped

    def below_max(self, numbers: Sequence[int]) -> int:
        """A threshold that some, not necessarily all, of the numbers exceed."""
        distinct = sorted(set(numbers))
        return self.rng.choice(distinct[:-1]) if len(distinct) > 1 else distinct[0] - 1
