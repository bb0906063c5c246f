"""Generate the labelled PII sample shipped as ``workloads/data/samples/pii_labelled.jsonl``.

Every value is made up here from a seeded generator (no real person's data): Emirates
IDs with valid Luhn check digits, UAE mobile and landline numbers inside the national
numbering plan, AE and foreign IBANs with valid mod-97 check digits, e-mail addresses,
Luhn-valid card numbers and names, written in the formats people use (dashes, spaces,
``+971``/``00971``/``0`` prefixes, Arabic-Indic digits for some). Some values are written in
less usual ways (``971`` with no ``+``, slashes in an Emirates ID, dots in a card
number, an upper-case address) that the recognisers do not all cover. Hard negatives sit
beside them, unlabelled: Emirates IDs and card numbers with a wrong check digit, IBANs
failing mod-97, numbers outside the UAE plan, invoice numbers, dates, prices.

Each line is ``{"id": n, "text": "...", "spans": [{"start": s, "end": e, "type": T}]}``
with character offsets into ``text``. `workloads.data.pii_eval` measures recall and
precision per type against it.

Usage (regenerates the shipped file byte for byte)::

    python -m workloads.data.make_pii_sample --output workloads/data/samples/pii_labelled.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from workloads.data.make_corpus import PARAGRAPHS

SEED = 971
DEFAULT_DOCUMENTS = 600
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "samples" / "pii_labelled.jsonl"

FIRST = (
    "Ahmed", "Fatima", "Mohammed", "Aisha", "Khalid", "Mariam", "Omar", "Noura", "Saeed",
    "Hessa", "Rashid", "Latifa", "Priya", "Rahul", "Maria", "John", "Elena", "Wei",
)  # fmt: skip
LAST = (
    "Al Mansoori", "Al Hashimi", "Al Nuaimi", "Al Zaabi", "Al Ketbi", "Al Suwaidi",
    "Al Shamsi", "Al Mazrouei", "Nair", "Sharma", "Santos", "Smith", "Petrova", "Chen",
)  # fmt: skip
DOMAINS = ("example.ae", "mail.ae", "company.co.ae", "uaeu.ac.ae", "gmail.com", "outlook.com")
AE_BANKS = ("033", "026", "030", "035", "044", "046", "050", "023")
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")

Segment = str | tuple[str, str]  # plain text, or (entity type, value)


def luhn_digit(payload: str) -> str:
    """The Luhn check digit that completes ``payload``."""
    total = 0
    for index, char in enumerate(reversed(payload)):
        value = int(char)
        if index % 2 == 0:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return str((10 - total % 10) % 10)


def _digits(rng: random.Random, count: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(count))


def emirates_id(rng: random.Random, *, valid: bool = True) -> str:
    payload = f"784{rng.randint(1950, 2012)}{_digits(rng, 7)}"
    check = luhn_digit(payload)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    number = payload + check
    style = rng.random()
    if style < 0.6:
        return f"{number[:3]}-{number[3:7]}-{number[7:14]}-{number[14]}"
    if style < 0.85:
        return number
    return f"{number[:3]} {number[3:7]} {number[7:14]} {number[14]}"


def mobile(rng: random.Random) -> str:
    operator = rng.choice("0234568")
    rest = _digits(rng, 7)
    return rng.choice(
        (
            f"+971 5{operator} {rest[:3]} {rest[3:]}",
            f"+9715{operator}{rest}",
            f"00971 5{operator} {rest[:3]} {rest[3:]}",
            f"05{operator} {rest[:3]} {rest[3:]}",
            f"05{operator}-{rest[:3]}-{rest[3:]}",
            f"05{operator}{rest}",
            f"+971-5{operator}-{rest}",
        )
    )


def landline(rng: random.Random) -> str:
    area = rng.choice("234679")
    rest = rng.choice("2345678") + _digits(rng, 6)
    return rng.choice(
        (
            f"0{area} {rest[:3]} {rest[3:]}",
            f"0{area}-{rest}",
            f"(0{area}) {rest}",
            f"+971 {area} {rest[:3]} {rest[3:]}",
            f"+971 (0){area} {rest[:3]} {rest[3:]}",
            f"00971{area}{rest}",
        )
    )


def _iban_check(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return f"{98 - int(number) % 97:02d}"


def iban(rng: random.Random, *, country: str = "AE", valid: bool = True) -> str:
    lengths = {"AE": 19, "DE": 18, "SA": 20, "GB": 18}
    if country == "GB":
        bban = "NWBK" + _digits(rng, 14)
    else:
        bban = (rng.choice(AE_BANKS) if country == "AE" else "") + _digits(
            rng, lengths[country] - (3 if country == "AE" else 0)
        )
    check = _iban_check(country, bban)
    if not valid:
        # Any other value fails mod 97, except one 97 away (00/01 for 97/98).
        wrong = [f"{c:02d}" for c in range(100) if (c - int(check)) % 97]
        check = rng.choice(wrong)
    code = country + check + bban
    if rng.random() < 0.5:
        return " ".join(code[i : i + 4] for i in range(0, len(code), 4))
    return code


def email(rng: random.Random, first: str, last: str) -> str:
    local = rng.choice(
        (
            f"{first}.{last}".replace(" ", ""),
            f"{first[0]}{last}".replace(" ", ""),
            f"{first}{rng.randint(1, 99)}",
        )
    ).lower()
    return f"{local}@{rng.choice(DOMAINS)}"


def card(rng: random.Random, *, valid: bool = True) -> str:
    kind = rng.choice(("visa", "mastercard", "amex"))
    if kind == "amex":
        payload = rng.choice(("34", "37")) + _digits(rng, 12)
    elif kind == "visa":
        payload = "4" + _digits(rng, 14)
    else:
        payload = f"5{rng.randint(1, 5)}" + _digits(rng, 13)
    check = luhn_digit(payload)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    number = payload + check
    if kind == "amex":
        return f"{number[:4]} {number[4:10]} {number[10:]}"
    separator = rng.choice((" ", "-", ""))
    return separator.join(number[i : i + 4] for i in range(0, 16, 4))


def name(rng: random.Random) -> tuple[str, str]:
    return rng.choice(FIRST), rng.choice(LAST)


def _document(rng: random.Random) -> list[Segment]:
    first, last = name(rng)
    person: Segment = ("PERSON", f"{first} {last}")
    kind = rng.randrange(12)
    if kind == 0:
        return [
            "Dear ", person, ", your Emirates ID ", ("EMIRATES_ID", emirates_id(rng)),
            " has been linked to mobile ", ("PHONE_NUMBER", mobile(rng)), ".",
        ]  # fmt: skip
    if kind == 1:
        return [
            "Refund of AED ", f"{rng.randint(50, 9000)}.00", " to ",
            ("IBAN_CODE", iban(rng)), " (account holder ", person, ").",
        ]  # fmt: skip
    if kind == 2:
        return [
            "For bookings call our Dubai office on ", ("PHONE_NUMBER", landline(rng)),
            " or write to ", ("EMAIL_ADDRESS", email(rng, first, last)), ".",
        ]  # fmt: skip
    if kind == 3:
        return [
            "Payment declined for card ", ("CREDIT_CARD", card(rng)), " on invoice INV-",
            f"{rng.randint(2019, 2026)}-{_digits(rng, 6)}", ".",
        ]  # fmt: skip
    if kind == 4:
        return [
            person, " (EID ", ("EMIRATES_ID", emirates_id(rng)), ") moved to Sharjah; ",
            "new landline ", ("PHONE_NUMBER", landline(rng)), ".",
        ]  # fmt: skip
    if kind == 5:
        number = mobile(rng).translate(ARABIC_INDIC)
        return ["رقم الهاتف ", ("PHONE_NUMBER", number), " للتواصل مع ", person, "."]
    if kind == 6:
        country = rng.choice(("DE", "SA", "GB"))
        return [
            "Transfer from ", ("IBAN_CODE", iban(rng, country=country)), " to ",
            ("IBAN_CODE", iban(rng)), " reference ", _digits(rng, 8), ".",
        ]  # fmt: skip
    if kind == 7:
        # Hard negatives only: wrong check digits, numbers outside the plan, dates.
        return [
            "Form rejected: ID ", emirates_id(rng, valid=False), ", card ",
            card(rng, valid=False), ", IBAN ", iban(rng, valid=False), ", phone 01 ",
            _digits(rng, 3), " ", _digits(rng, 4), ", dated ",
            f"{rng.randint(2019, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            ".",
        ]  # fmt: skip
    if kind == 8:
        return [
            "Order ", _digits(rng, 10), " shipped to ", person, ", tracking ",
            f"1Z{_digits(rng, 16)}", ", contact ", ("EMAIL_ADDRESS", email(rng, first, last)),
            ".",
        ]  # fmt: skip
    if kind == 9:
        eid = emirates_id(rng).translate(ARABIC_INDIC)
        return ["رقم الهوية ", ("EMIRATES_ID", eid), " صادر في ", str(rng.randint(2015, 2024))]
    if kind == 10:
        # Real but less usual ways of writing the same values; the recognisers are not
        # written for all of them, and the measured recall shows it.
        eid = emirates_id(rng).replace("-", "").replace(" ", "")
        unusual = rng.choice(
            (
                ("PHONE_NUMBER", "971" + "".join(filter(str.isdigit, mobile(rng)))[-9:]),
                ("EMIRATES_ID", f"{eid[:3]}/{eid[3:7]}/{eid[7:14]}/{eid[14]}"),
                ("CREDIT_CARD", card(rng).replace(" ", ".").replace("-", ".")),
                ("EMAIL_ADDRESS", email(rng, first, last).upper()),
                ("PHONE_NUMBER", "+971 5" + rng.choice("0245") + " " + _digits(rng, 7)),
            )
        )
        return ["WhatsApp note from ", person, ": ", unusual, " please update."]
    # Plain text from the corpus grammar, with no PII.
    return [rng.choice(PARAGRAPHS)(rng)]


def assemble(segments: Sequence[Segment]) -> dict[str, object]:
    """The text of ``segments`` and the character spans of its labelled values."""
    text = ""
    spans: list[dict[str, object]] = []
    for segment in segments:
        if isinstance(segment, tuple):
            entity, value = segment
            spans.append({"start": len(text), "end": len(text) + len(value), "type": entity})
            text += value
        else:
            text += segment
    return {"text": text, "spans": spans}


def generate(
    documents: int = DEFAULT_DOCUMENTS,
    seed: int = SEED,
    make: Callable[[random.Random], list[Segment]] = _document,
) -> list[dict[str, object]]:
    """The sample's records."""
    rng = random.Random(seed)
    return [{"id": index, **assemble(make(rng))} for index in range(documents)]


def write(path: Path, records: Sequence[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(record, ensure_ascii=False) for record in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.data.make_pii_sample")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--documents", type=int, default=DEFAULT_DOCUMENTS)
    args = parser.parse_args(argv)
    write(args.output, generate(args.documents))
    print(f"wrote {args.documents} labelled documents to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
