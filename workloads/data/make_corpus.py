"""Generate the small synthetic corpus shipped as ``workloads/data/corpus.txt``.

The text is produced here from a seeded grammar (an almanac of a fictional oasis
town: weather notes, market reports, travel logs, sums, sayings), so it carries no
third-party copyright and is dedicated to the public domain (CC0) with the package.
It is regular enough that a tiny model's loss falls visibly in a few hundred steps
and varied enough that it does not collapse to memorising one sentence.

Usage (regenerates the shipped file byte for byte)::

    python -m workloads.data.make_corpus --output workloads/data/corpus.txt
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

SEED = 20240520
DEFAULT_TARGET_BYTES = 240_000

NUMBERS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
)
DAYS = (
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
)
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
PLACES = (
    "the old harbour",
    "the date gardens",
    "the north gate",
    "the salt flats",
    "the market square",
    "the well of seven stones",
    "the lighthouse",
    "the pearl divers' jetty",
    "the falcon tower",
    "the red dunes",
    "the spice lane",
    "the library steps",
    "the mangrove creek",
    "the fort",
)
PEOPLE = (
    "the baker",
    "the ferryman",
    "a young weaver",
    "the old navigator",
    "the schoolteacher",
    "a potter",
    "the harbour master",
    "two fishermen",
    "the astronomer",
    "a camel trader",
    "the lamp keeper",
    "the physician",
    "a group of children",
    "the water engineer",
)
GOODS = (
    "dates",
    "saffron",
    "pearls",
    "copper pots",
    "woven mats",
    "dried lemons",
    "frankincense",
    "indigo cloth",
    "glass beads",
    "salted fish",
    "rose water",
    "cardamom",
    "honey",
    "rope",
)
WEATHER = (
    "clear and still",
    "hazy with fine dust",
    "bright with a steady sea breeze",
    "hot and humid",
    "cool after a short rain",
    "windy from the north",
    "calm until noon",
)
ADJECTIVES = (
    "patient",
    "careful",
    "quiet",
    "cheerful",
    "tired",
    "curious",
    "generous",
    "stubborn",
    "clever",
    "gentle",
    "proud",
    "honest",
)
VERBS = (
    "repaired the nets",
    "counted the sacks of grain",
    "swept the courtyard",
    "mended a broken wheel",
    "wrote a long letter",
    "watered the palms",
    "tuned an old lute",
    "measured the tide",
    "painted the door blue",
    "baked flat bread",
    "carried water jars",
    "read the star charts",
)
SAYINGS = (
    "A well that is shared never runs dry.",
    "The patient trader sells the last sack at the best price.",
    "Count the stars before you promise the sea.",
    "Shade is planted by those who will not sit in it.",
    "A map is only as honest as the one who walked the road.",
    "When the wind changes, mend the sail before you curse it.",
    "Water remembers every hand that dug the channel.",
    "The slowest camel still reaches the well.",
)


def _number(rng: random.Random, high: int = 20) -> str:
    return NUMBERS[rng.randint(1, high)]


def weather_note(rng: random.Random) -> str:
    day, month = rng.choice(DAYS), rng.choice(MONTHS)
    temperature = rng.randint(18, 46)
    return (
        f"On {day} in {month} the sky over {rng.choice(PLACES)} was {rng.choice(WEATHER)}. "
        f"The thermometer at the fort read {temperature} degrees at noon and "
        f"{temperature - rng.randint(4, 12)} degrees after sunset. "
        f"{rng.choice(PEOPLE).capitalize()} said the tide would turn "
        f"{rng.choice(['early', 'late', 'on time'])} tomorrow."
    )


def market_report(rng: random.Random) -> str:
    good, other = rng.sample(GOODS, 2)
    price = rng.randint(2, 90)
    change = rng.choice(["rose to", "fell to", "held steady at"])
    return (
        f"Market report: the price of {good} {change} {price} coins a measure, while "
        f"{other} sold for {price + rng.randint(-1, 15)} coins. "
        f"Traders at {rng.choice(PLACES)} expect {rng.choice(['more', 'fewer'])} caravans "
        f"before the end of {rng.choice(MONTHS)}."
    )


def travel_log(rng: random.Random) -> str:
    person = rng.choice(PEOPLE)
    return (
        f"{person.capitalize()} walked from {rng.choice(PLACES)} to {rng.choice(PLACES)} "
        f"in {_number(rng, 9)} hours, carrying {rng.choice(GOODS)}. "
        f"On the way, {rng.choice(PEOPLE)} {rng.choice(VERBS)} and "
        f"{rng.choice(PEOPLE)} {rng.choice(VERBS)}. "
        f"By evening {person} was {rng.choice(ADJECTIVES)} but glad to be home."
    )


def arithmetic(rng: random.Random) -> str:
    a, b = rng.randint(0, 10), rng.randint(0, 10)
    c, d = rng.randint(1, 20), rng.randint(0, 20)
    high, low = max(c, d), min(c, d)
    return (
        f"{NUMBERS[a].capitalize()} plus {NUMBERS[b]} is {NUMBERS[a + b]}. "
        f"{NUMBERS[high].capitalize()} minus {NUMBERS[low]} is {NUMBERS[high - low]}."
    )


def saying(rng: random.Random) -> str:
    return f"As the elders of the oasis say: {rng.choice(SAYINGS)}"


def dialogue(rng: random.Random) -> str:
    good = rng.choice(GOODS)
    count = _number(rng, 12)
    return (
        f'"How many baskets of {good} are left?" asked {rng.choice(PEOPLE)}. '
        f'"{count.capitalize()}," answered {rng.choice(PEOPLE)}, '
        f'"and {_number(rng, 5)} more arrive with the boat from {rng.choice(PLACES)}."'
    )


PARAGRAPHS: tuple[Callable[[random.Random], str], ...] = (
    weather_note,
    market_report,
    travel_log,
    arithmetic,
    saying,
    dialogue,
)


def generate(target_bytes: int = DEFAULT_TARGET_BYTES, seed: int = SEED) -> str:
    """The corpus text: paragraphs drawn from the grammar until ``target_bytes``."""
    rng = random.Random(seed)
    paragraphs: list[str] = []
    size = 0
    while size < target_bytes:
        sentences = [rng.choice(PARAGRAPHS)(rng) for _ in range(rng.randint(1, 3))]
        paragraph = " ".join(sentences)
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.data.make_corpus")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--bytes", type=int, default=DEFAULT_TARGET_BYTES)
    args = parser.parse_args(argv)
    args.output.write_text(generate(args.bytes), encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
